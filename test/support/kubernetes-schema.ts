/**
 * Kubernetes objects checked as an API server with strict field validation (kubectl's default) checks
 * them, offline, against the Kubernetes API's OpenAPI definitions as kubernetes-models ships them: its
 * compiled validators (required fields, types, enums, formats), then its TypeScript declarations of the
 * same definitions for the fields no definition names, which the validators let through.
 */
import path from 'node:path'
import ts from 'typescript'

interface ModelClass {
  new (data: object): { validate(): void }
  apiVersion: string
  kind: string
}

/** `/spec/template/spec/containers/0/ports` → `spec.template.spec.containers[0].ports`, as kubectl names fields. */
function fieldPath(pointer: string): string {
  return pointer.split('/').slice(1).map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce((out, part) => /^\d+$/.test(part) ? `${out}[${part}]` : out === '' ? part : `${out}.${part}`, '')
}

/** The model class of an apiVersion and kind (`apps/v1` + `Deployment` → `kubernetes-models/apps/v1/Deployment`). */
async function modelOf(apiVersion: unknown, kind: unknown): Promise<{ specifier: string; model: ModelClass } | undefined> {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return undefined
  if (!/^([a-z0-9.-]+\/)?v\d+((alpha|beta)\d+)?$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return undefined
  const specifier = `kubernetes-models/${apiVersion}/${kind}`
  try {
    const model = ((await import(specifier)) as Record<string, ModelClass | undefined>)[kind]
    return model?.apiVersion === apiVersion && model.kind === kind ? { specifier, model } : undefined
  } catch {
    return undefined  // no such group, version or kind
  }
}

function schemaProblems(model: ModelClass, manifest: object): string[] {
  try {
    new model(manifest).validate()
    return []
  } catch (error) {
    const issues = (error as { errors?: { instancePath: string; message?: string; params?: object }[] }).errors
    if (!issues) throw error
    return issues.map((issue) => {
      const detail = issue.message ?? 'is invalid'
      const allowed = (issue.params as { allowedValues?: unknown[] } | undefined)?.allowedValues
      return `${fieldPath(issue.instancePath) || '(root)'}: ${detail}${allowed ? ` ${JSON.stringify(allowed)}` : ''}`
    })
  }
}

/** Every field of `value` that `type` does not declare, recursing through objects, arrays and maps. */
function unknownFields(checker: ts.TypeChecker, type: ts.Type, value: unknown, at: string, out: string[]): void {
  if (value === null || typeof value !== 'object') return
  const candidates = (type.isUnion() ? type.types : [type]).filter((t) => (t.flags & ts.TypeFlags.Object) !== 0)
  if (Array.isArray(value)) {
    const array = candidates.find((t) => checker.isArrayType(t))
    const element = array && checker.getTypeArguments(array as ts.TypeReference)[0]
    if (element) value.forEach((item, index) => unknownFields(checker, element, item, `${at}[${index}]`, out))
    return
  }
  const object = candidates.find((t) => !checker.isArrayType(t))
  if (!object) return  // a type mismatch: the schema check reports it
  const map = object.getStringIndexType()  // labels, data, resources.requests…
  for (const [key, child] of Object.entries(value)) {
    const field = at === '' ? key : `${at}.${key}`
    const declared = object.getProperty(key)
    const childType = declared ? checker.getTypeOfSymbol(declared) : map
    if (childType === undefined) out.push(`${field}: unknown field "${key}"`)
    else unknownFields(checker, childType, child, field, out)
  }
}

/** One TypeScript program over the declarations of the given modules, and a type checker of values against them. */
function declarationsOf(specifiers: readonly string[]) {
  // A file that exists only in memory, inside the project so that node_modules resolves.
  const fileName = path.resolve('test/support/kubernetes-kinds.generated.ts')
  const text = specifiers.map((specifier, index) => {
    const kind = specifier.slice(specifier.lastIndexOf('/') + 1)
    return `export type Kind${index} = import('${specifier}').I${kind}\n`
  }).join('')
  const options: ts.CompilerOptions = {
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
    strict: true, noEmit: true, skipLibCheck: true, types: [], lib: ['lib.es2022.d.ts'],
  }
  const host = ts.createCompilerHost(options)
  const { getSourceFile, fileExists } = host
  host.getSourceFile = (name, language, ...rest) =>
    name === fileName ? ts.createSourceFile(name, text, language) : getSourceFile.call(host, name, language, ...rest)
  host.fileExists = (name) => name === fileName || fileExists.call(host, name)
  const program = ts.createProgram([fileName], options, host)
  const checker = program.getTypeChecker()
  const aliases = program.getSourceFile(fileName)!.statements.filter(ts.isTypeAliasDeclaration)
  return aliases.map((alias, index) => {
    const type = checker.getTypeFromTypeNode(alias.type)
    // An unresolved import is `any`, which would let every field through.
    if ((type.flags & ts.TypeFlags.Object) === 0) throw new Error(`no TypeScript declaration in ${specifiers[index]}`)
    return (value: unknown) => { const out: string[] = []; unknownFields(checker, type, value, '', out); return out }
  })
}

/**
 * The problems of each manifest, as `field.path: message` lines; an empty list when the API server would
 * accept it. An apiVersion and kind that kubernetes-models does not know is itself a problem.
 */
export async function validateManifests(manifests: readonly unknown[]): Promise<string[][]> {
  const models = await Promise.all(manifests.map((manifest) =>
    manifest !== null && typeof manifest === 'object' && 'apiVersion' in manifest && 'kind' in manifest
      ? modelOf(manifest.apiVersion, manifest.kind) : undefined))
  const specifiers = [...new Set(models.flatMap((found) => found ? [found.specifier] : []))]
  const checks = new Map(declarationsOf(specifiers).map((check, index) => [specifiers[index]!, check]))
  return manifests.map((manifest, index) => {
    const found = models[index]
    if (!found) {
      const { apiVersion, kind } = (manifest ?? {}) as { apiVersion?: unknown; kind?: unknown }
      return [`(root): unknown apiVersion and kind ${JSON.stringify(apiVersion)} ${JSON.stringify(kind)}`]
    }
    return [...schemaProblems(found.model, manifest as object), ...checks.get(found.specifier)!(manifest)]
  })
}
