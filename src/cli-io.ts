/** What the CLI's commands share: reading a secret from standard input, and errors as one stderr line. */

/** Standard input as text, one trailing newline dropped (a secret piped from a file or `echo`). */
export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '')
}

/** stderr takes one line per error: a message with newlines in it is folded. */
export const oneLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, ' ')
