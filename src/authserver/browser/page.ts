/**
 * The HTML of the embedded server's pages (login, consent, device, errors): rendered on the server, no
 * script, no third-party asset, and every page and redirect behind the headers of
 * RFC 9700 §4.16 (no framing), §4.2.4 (no Referer leaking a code) and RFC 6749 §5.1 (no caching).
 */
import { createHash } from 'node:crypto'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { TemporarilyUnavailable, TooManyAttempts } from '../../errors/oauth-errors.js'

/** Markup that is already safe: what {@link html} returns, and the only thing it does not escape. */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

const ESCAPES: Readonly<Record<string, string>> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', '\'': '&#39;' }

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => ESCAPES[char]!)
}

type Interpolated = SafeHtml | string | number | undefined | false | readonly Interpolated[]

function render(value: Interpolated): string {
  if (value === undefined || value === false) return ''
  if (value instanceof SafeHtml) return value.value
  if (Array.isArray(value)) return value.map(render).join('')
  return escapeHtml(String(value))
}

/** A template tag that escapes every interpolation that is not itself `html`: client names, scopes, user input. */
export function html(strings: TemplateStringsArray, ...values: Interpolated[]): SafeHtml {
  let out = strings[0]!
  values.forEach((value, index) => { out += render(value) + strings[index + 1]! })
  return new SafeHtml(out)
}

const STYLE = [
  'body{font-family:system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d1f23}',
  'main{max-width:26rem;margin:3rem auto;padding:2rem;background:#fff;border-radius:.5rem;box-shadow:0 1px 3px #0003}',
  'h1{font-size:1.4rem;margin-top:0}',
  'label{display:block;margin-top:1rem;font-weight:600}',
  'input[type=text],input[type=password]{box-sizing:border-box;width:100%;padding:.6rem;margin-top:.3rem;font-size:1rem;border:1px solid #8a8f98;border-radius:.3rem}',
  '.check{display:flex;gap:.5rem;align-items:center;font-weight:400}',
  '.actions{display:flex;gap:.75rem;margin-top:1.5rem}',
  'button{padding:.6rem 1.2rem;font-size:1rem;border-radius:.3rem;border:1px solid #1d4ed8;background:#1d4ed8;color:#fff;cursor:pointer}',
  'button.secondary{background:#fff;color:#1d4ed8}',
  'a.button{display:block;text-align:center;padding:.6rem 1.2rem;border-radius:.3rem;border:1px solid #1d4ed8;color:#1d4ed8;text-decoration:none}',
  '.or{color:#555;margin-top:1.5rem}',
  'button:focus-visible,input:focus-visible,a:focus-visible{outline:3px solid #f59e0b;outline-offset:2px}',
  '.alert{padding:.75rem;border-radius:.3rem;background:#fde8e8;color:#8b1a1a;margin:1rem 0}',
  '.code{font-family:ui-monospace,monospace;font-size:1.3rem;letter-spacing:.1rem}',
  'ul{padding-left:1.2rem}',
].join('')

/**
 * The only style is inline and allowed by its hash; nothing else may load or run, and no one may frame
 * the page. No form-action: Chromium applies it to the redirect after a form post, and the consent
 * form's answer is a redirect to the client.
 */
const CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash('sha256').update(STYLE).digest('base64')}'`,
  "img-src 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ')

/** No framing, no Referer, no caching (RFC 9700 §4.16, §4.2.4; RFC 6749 §5.1) on every browser-facing answer, redirects included. */
export function browserHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header('cache-control', 'no-store')
    .header('pragma', 'no-cache')
    .header('x-frame-options', 'DENY')
    .header('content-security-policy', CSP)
    .header('referrer-policy', 'no-referrer')
    .header('x-content-type-options', 'nosniff')
}

export interface Page {
  readonly status: number
  readonly title: string
  readonly body: SafeHtml
}

/** Sends a whole document: one `main` landmark, a heading, the page's own content. */
export function sendPage(reply: FastifyReply, page: Page): FastifyReply {
  const document = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>${page.title}</title>
<style>${new SafeHtml(STYLE)}</style>
</head>
<body>
<main>
<h1>${page.title}</h1>
${page.body}
</main>
</body>
</html>
`
  return browserHeaders(reply).code(page.status).header('content-type', 'text/html; charset=utf-8').send(document.value)
}

/** An error the user reads (never a redirect): what happened, and what to do next. */
export function sendErrorPage(reply: FastifyReply, status: number, title: string, message: string): FastifyReply {
  return sendPage(reply, { status, title, body: html`<p role="alert" class="alert">${message}</p>` })
}

/** A redirect from a page or /authorize: 302 after a GET, 303 after a POST, never 307 (RFC 9700 §4.12). */
export function sendRedirect(reply: FastifyReply, method: string, location: string): FastifyReply {
  return browserHeaders(reply).code(method === 'POST' ? 303 : 302).header('location', location).send()
}

/** The hidden CSRF field every form carries (RFC 6749 §10.12). */
export function csrfField(token: string): SafeHtml {
  return html`<input type="hidden" name="_csrf" value="${token}">`
}

/**
 * The error handler of every page route: a refused CSRF token (RFC 6749 §10.12), a body that cannot be read, or a
 * failure of ours, each as a page that says what to do, never a stack.
 */
export function pageErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error.code === 'FST_CSRF_INVALID_TOKEN' || error.code === 'FST_CSRF_MISSING_SECRET') {
    request.log.info({ reason: error.code }, 'page form refused: CSRF token')
    return sendErrorPage(reply, 403, 'Form expired',
      'This form has expired or was not sent from this site. Go back, reload the page and try again.')
  }
  if (error instanceof TooManyAttempts) {
    reply.header('retry-after', String(error.retryAfterSeconds))
    return sendErrorPage(reply, 429, 'Too many requests', 'Too many requests from your network. Wait a minute and try again.')
  }
  if (error instanceof TemporarilyUnavailable) {
    reply.header('retry-after', String(error.retryAfterSeconds))
    return sendErrorPage(reply, 503, 'Temporarily unavailable', 'The service is briefly unavailable. Try again in a few seconds.')
  }
  const status = error.statusCode ?? (error as { status?: unknown }).status
  if (typeof status === 'number' && status >= 400 && status < 500) {
    request.log.info({ reason: error.code }, 'page request unreadable')
    return sendErrorPage(reply, 400, 'Bad request', 'The request could not be read. Go back and try again.')
  }
  request.log.error({ err: error }, 'page failed')
  return sendErrorPage(reply, 500, 'Something went wrong', 'The server could not complete this step. Try again in a moment.')
}
