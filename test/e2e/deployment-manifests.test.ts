/**
 * Issue 22: the Kubernetes manifests of docs/deployment.md apply to a real cluster — every object passes the
 * Kubernetes API schema with strict field validation (test/support/kubernetes-schema.ts) — and agree with
 * Portcullis: the ConfigMap holds a valid config, the probes are answered by the admin listener it starts,
 * the pod runs as uid 1000, and Kubernetes waits for the drain before SIGKILL.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { parseAllDocuments, parseDocument } from 'yaml'
import { loadConfig } from '../../src/check/load.js'
import { parseDuration } from '../../src/config/units.js'
import { runPortcullis } from '../../src/server/run.js'
import { parseListen } from '../../src/config/listen.js'
import { validateManifests } from '../support/kubernetes-schema.js'

// Objects are read field by field, as the API server does; `any` keeps that readable.
type Manifest = Record<string, any>  // eslint-disable-line @typescript-eslint/no-explicit-any
interface NamedPort { name: string; containerPort: number }

const MARKDOWN = readFileSync('docs/deployment.md', 'utf8')
const DOCUMENTS = [...MARKDOWN.matchAll(/^```ya?ml\n([\s\S]*?)^```$/gm)].flatMap((block) => parseAllDocuments(block[1]!).map((doc) => {
  if (doc.errors.length > 0) throw new Error(`docs/deployment.md: ${doc.errors[0]!.message}`)
  return { text: doc.toString(), value: doc.toJS() as Manifest }
}))
// The one block that is not an object but a patch of one says so in its first line.
const PATCH = DOCUMENTS.find((doc) => doc.text.startsWith('# scale-out.yaml'))!.value
const MANIFESTS = DOCUMENTS.map((doc) => doc.value).filter((value) => value !== PATCH)
/** Custom resources, whose schema is their operator's CRD rather than the Kubernetes API's. */
const CUSTOM_KINDS = ['monitoring.coreos.com/v1 ServiceMonitor']
const isCustom = (m: Manifest) => CUSTOM_KINDS.includes(`${m.apiVersion} ${m.kind}`)

const one = (kind: string): Manifest => {
  const found = MANIFESTS.filter((m) => m.kind === kind)
  if (found.length !== 1) throw new Error(`docs/deployment.md: ${found.length} objects of kind ${kind}, expected 1`)
  return found[0]!
}
const deployment = one('Deployment')
const pod = deployment.spec.template.spec
const container = pod.containers.find((c: { name: string }) => c.name === 'portcullis')
const CONFIG_TEXT = one('ConfigMap').data['portcullis.yaml'] as string
// The config's ${VARS} come from the Deployment's env; any value of secret length stands in for them (the
// key-encryption key: 32 bytes in base64, as `openssl rand -base64 32` makes).
const ENV = Object.fromEntries(container.env.map((v: { name: string }) =>
  [v.name, v.name === 'KEY_ENCRYPTION_KEY' ? Buffer.alloc(32, 7).toString('base64') : 'x'.repeat(32)]))
const config = loadConfig('portcullis.yaml', CONFIG_TEXT, ENV)

/** The container port that a probe or Service names (by name or by number). */
const containerPort = (port: string | number): number | undefined =>
  typeof port === 'number' ? port : container.ports.find((p: NamedPort) => p.name === port)?.containerPort

/** What a strategic merge patch of maps only does: a deep merge (lists would need their merge keys). */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (Array.isArray(patch)) throw new Error('the scale-out patch has a list: merge it by its patchMergeKey here')
  if (patch === null || typeof patch !== 'object') return patch
  const base = target !== null && typeof target === 'object' && !Array.isArray(target) ? target as Record<string, unknown> : {}
  return Object.fromEntries([...Object.keys(base), ...Object.keys(patch).filter((k) => !(k in base))]
    .map((key) => [key, key in patch ? mergePatch(base[key], (patch as Record<string, unknown>)[key]) : base[key]]))
}

/** How many pods the budget lets a drain evict at once, of `replicas` healthy ones. */
function allowedDisruptions(budget: Manifest, replicas: number): number {
  const count = (value: number | string) => typeof value === 'number' ? value : Math.ceil(replicas * parseInt(value, 10) / 100)
  const { minAvailable, maxUnavailable } = budget.spec
  return minAvailable !== undefined ? replicas - count(minAvailable) : count(maxUnavailable)
}

describe('docs/deployment.md Kubernetes manifests', () => {
  it('are the six objects of one installation, the scale-out patch, and the autoscaler of the Redis setup', () => {
    expect(MANIFESTS.map((m) => m.kind)).toEqual(
      ['ConfigMap', 'PersistentVolumeClaim', 'Deployment', 'PodDisruptionBudget', 'Service', 'ServiceMonitor', 'HorizontalPodAutoscaler'])
    expect(Object.keys(PATCH)).toEqual(['spec'])
  })

  it('take every secret the config names from a Secret: client secrets and the key-encryption key', () => {
    const named = [...CONFIG_TEXT.matchAll(/\$\{([A-Z_]+)\}/g)].map((match) => match[1])
    expect(named).toEqual(expect.arrayContaining(['BILLING_SECRET', 'KEY_ENCRYPTION_KEY']))
    for (const name of named) {
      const variable = container.env.find((v: { name: string }) => v.name === name)
      expect(variable?.valueFrom?.secretKeyRef?.name, name).toBe('portcullis-secrets')
      // The documented `kubectl create secret` makes the key the Deployment reads.
      expect(MARKDOWN, name).toContain(`--from-literal=${variable.valueFrom.secretKeyRef.key}=`)
    }
    expect(config.authorization_server?.signing?.key_encryption_key).toBe(ENV.KEY_ENCRYPTION_KEY)
  })

  it('scale by CPU only beside the Redis store, never below what the disruption budget needs to keep one pod up', () => {
    const hpa = one('HorizontalPodAutoscaler')
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name })
    expect(allowedDisruptions(one('PodDisruptionBudget'), hpa.spec.minReplicas)).toBeLessThan(hpa.spec.minReplicas)
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2)
    // More than one replica needs the Redis store: the block says so, and the SQLite Deployment stays at one.
    expect(DOCUMENTS.find((doc) => doc.value === hpa)!.text).toMatch(/^# hpa\.yaml: only with authorization_server\.store\.type redis/)
    expect(deployment.spec.replicas).toBe(1)
    expect(container.resources.requests.cpu).toBeDefined()
  })

  it('docs/decision.md\'s ingress-nginx Ingress passes the Kubernetes API schema and asks the decision endpoint', async () => {
    const decisionDoc = readFileSync('docs/decision.md', 'utf8')
    const section = decisionDoc.slice(decisionDoc.indexOf('## ingress-nginx'))
    const ingress = parseDocument(/^```yaml\n([\s\S]*?)^```$/m.exec(section)![1]!).toJS() as Manifest
    expect(`${ingress.apiVersion} ${ingress.kind}`).toBe('networking.k8s.io/v1 Ingress')
    expect(await validateManifests([ingress])).toEqual([[]])
    const annotations = ingress.metadata.annotations as Record<string, string>
    expect(new URL(annotations['nginx.ingress.kubernetes.io/auth-url']!).pathname).toBe('/decide')
    expect(annotations['nginx.ingress.kubernetes.io/auth-response-headers']).toBe('X-Auth-Subject, X-Auth-Client-Id, X-Auth-Scopes, X-Auth-Issuer')
    expect(annotations['nginx.ingress.kubernetes.io/auth-cache-duration']).toBe('200 1s')
  })

  it('pass the Kubernetes API schema: known apiVersion and kind, required fields, types, enums, no unknown field', async () => {
    const checked = MANIFESTS.filter((m) => !isCustom(m))
    const problems = await validateManifests(checked)
    expect(Object.fromEntries(checked.map((m, i) => [`${m.kind}/${m.metadata?.name}`, problems[i]])))
      .toEqual(Object.fromEntries(checked.map((m) => [`${m.kind}/${m.metadata?.name}`, []])))
  })

  it('fail the schema when broken: each mutation of a copy is reported at its field, and nothing else', async () => {
    const broken = (mutate: (m: Manifest) => void, kind = 'Deployment') => {
      const copy = structuredClone(one(kind))
      mutate(copy)
      return copy
    }
    const containerAt = 'spec.template.spec.containers[0]'
    const cases: [Manifest, string[]][] = [
      [broken((m) => { m.spec.template.spec.containers[0].securityContext.runAsNonroot = true }),
        [`${containerAt}.securityContext.runAsNonroot: unknown field "runAsNonroot"`]],
      [broken((m) => { m.spec.template.spec.containers[0].livenessProbe.httpGet.prot = 9090 }),
        [`${containerAt}.livenessProbe.httpGet.prot: unknown field "prot"`]],
      // The pod's field, one level too high.
      [broken((m) => { m.spec.terminationGracePeriodSeconds = 30 }),
        ['spec.terminationGracePeriodSeconds: unknown field "terminationGracePeriodSeconds"']],
      [broken((m) => { delete m.spec.selector }), ['spec: must have required property selector']],
      [broken((m) => { m.spec.replicas = '1' }), ['spec.replicas: must be integer']],
      [broken((m) => { m.spec.strategy.type = 'Rolling' }),
        ['spec.strategy.type: must be equal to one of the allowed values ["Recreate","RollingUpdate"]']],
      [broken((m) => { m.spec.template.spec.containers[0].ports[1].containerPort = '9090' }),
        [`${containerAt}.ports[1].containerPort: must be integer`]],
      [broken((m) => { m.metadata.labels.tier = 1 }), ['metadata.labels.tier: must be string']],
      [broken((m) => { m.spec.maxUnavailable = { count: 1 } }, 'PodDisruptionBudget'),
        ['spec.maxUnavailable: must be string', 'spec.maxUnavailable: must be integer', 'spec.maxUnavailable: must match exactly one schema in "oneOf"']],
      [broken((m) => { m.data = { 'portcullis.yaml': 42 } }, 'ConfigMap'), ['data.portcullis.yaml: must be string']],
      [broken((m) => { m.apiVersion = 'apps/v1beta9' }), ['(root): unknown apiVersion and kind "apps/v1beta9" "Deployment"']],
      [broken((m) => { m.kind = 'Deploymnet' }), ['(root): unknown apiVersion and kind "apps/v1" "Deploymnet"']],
    ]
    expect(await validateManifests(cases.map(([manifest]) => manifest))).toEqual(cases.map(([, expected]) => expected))
  })

  it('refer only to what they define: labels, ConfigMap, claim, Secret, volumes and named ports', () => {
    const labels = deployment.spec.template.metadata.labels
    expect(labels).toMatchObject(deployment.spec.selector.matchLabels)
    for (const kind of ['Service', 'PodDisruptionBudget']) {
      const selector = one(kind).spec.selector
      expect(labels, kind).toMatchObject(selector.matchLabels ?? selector)
    }
    const volumes = new Map(pod.volumes.map((v: { name: string }) => [v.name, v]))
    for (const mount of container.volumeMounts) expect(volumes.has(mount.name), mount.name).toBe(true)
    expect(pod.volumes).toContainEqual({ name: 'config', configMap: { name: one('ConfigMap').metadata.name } })
    expect(pod.volumes).toContainEqual({ name: 'data', persistentVolumeClaim: { claimName: one('PersistentVolumeClaim').metadata.name } })
    // Every key the documented `kubectl create secret` makes, and only those, is read from that Secret.
    const command = /kubectl create secret generic (\S+)((?: \\\n)?(?:\s*--from-literal=[\w.-]+="[^"]*"(?: \\)?\s*(?:#[^\n]*)?\n?)+)/.exec(MARKDOWN)!
    const keys = [...command[2]!.matchAll(/--from-literal=([\w.-]+)=/g)].map((match) => match[1])
    expect(container.env.map((v: Manifest) => v.valueFrom.secretKeyRef)).toEqual(keys.map((key) => ({ name: command[1], key })))
    for (const port of one('Service').spec.ports) expect(containerPort(port.targetPort), port.name).toBeDefined()
  })

  it("the ConfigMap's portcullis.yaml is a valid Portcullis config, listening on the pod's address at the container ports", () => {
    // loadConfig above threw if it were not: schema, ${VARS}, references and the checks behind `portcullis check`.
    expect(config.server?.listen).toBe(`0.0.0.0:${containerPort('http')}`)
    // The kubelet probes the pod's IP, never its loopback: the admin listener must be on 0.0.0.0 in the pod.
    expect(config.admin?.listen).toBe(`0.0.0.0:${containerPort('admin')}`)
    // The SQLite store on the data volume, the only writable place with readOnlyRootFilesystem.
    const store = config.authorization_server?.store as { type: string; path?: string }
    const data = container.volumeMounts.find((m: { name: string }) => m.name === 'data')
    expect(store.type).toBe('sqlite')
    expect(path.dirname(store.path!)).toBe(data.mountPath)
  })

  it('probes /healthz for liveness and /readyz for readiness on the admin port, and that config answers both', async ({ onTestFinished }) => {
    const admin = parseListen(config.admin!.listen!)
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      expect(containerPort(probe.httpGet.port)).toBe(admin.port)
    }
    expect(container.livenessProbe.httpGet.path).toBe('/healthz')
    expect(container.readinessProbe.httpGet.path).toBe('/readyz')

    // The same config, on loopback and with its store in a temp dir, started as `portcullis start` does.
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-k8s-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const doc = parseDocument(CONFIG_TEXT)
    doc.setIn(['server', 'listen'], '127.0.0.1:0')
    doc.setIn(['admin', 'listen'], '127.0.0.1:0')
    doc.setIn(['authorization_server', 'store', 'path'], path.join(dir, 'portcullis.db'))
    writeFileSync(path.join(dir, 'portcullis.yaml'), doc.toString())
    const discard = () => new Writable({ write(_chunk, _encoding, callback) { callback() } })
    const running = await runPortcullis(path.join(dir, 'portcullis.yaml'),
      { port: 0, adminPort: 0, watch: false, env: ENV, logStream: discard(), auditStream: discard() })
    onTestFinished(() => running.shutdown('test'))
    const adminUrl = `http://127.0.0.1:${(running.admin!.server.address() as AddressInfo).port}`
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      const res = await fetch(`${adminUrl}${probe.httpGet.path}`)
      expect(res.status, probe.httpGet.path).toBe(200)
    }
  })

  it('runs the container as uid:gid 1000:1000, never root, without privilege escalation', () => {
    const effective = { ...pod.securityContext, ...container.securityContext }
    expect(effective).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, allowPrivilegeEscalation: false })
    expect(pod.securityContext.fsGroup).toBe(1000)  // the data volume is writable by uid 1000
  })

  it('gives the pod longer than the preStop sleep plus server.shutdown_timeout before SIGKILL', () => {
    // Kubernetes counts the grace period from the start of preStop; SIGTERM comes after it, and then
    // Portcullis drains for up to shutdown_timeout (default 10s, docs/configuration.md).
    const drainMs = parseDuration(config.server?.shutdown_timeout ?? '10s')
    const preStopMs = (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000
    expect(preStopMs).toBeGreaterThan(0)
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(preStopMs + drainMs)
  })

  it('has a PodDisruptionBudget that lets a drain evict one pod, alone or of the three of the scale-out patch', () => {
    const budget = one('PodDisruptionBudget')
    expect(allowedDisruptions(budget, deployment.spec.replicas)).toBe(1)
    expect(allowedDisruptions(budget, PATCH.spec.replicas)).toBe(1)
  })

  it('the scale-out patch, applied to the Deployment, gives a valid Deployment that rolls one pod at a time', async () => {
    const scaled = mergePatch(deployment, PATCH) as Manifest
    expect(await validateManifests([scaled])).toEqual([[]])
    // API validation beyond the schema: rollingUpdate only with type RollingUpdate.
    expect(scaled.spec.strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } })
    expect(scaled.spec.replicas).toBe(3)
  })
})
