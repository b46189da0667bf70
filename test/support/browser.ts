/**
 * A minimal browser for the embedded server's pages, over fetch: a cookie jar, manual redirects, and
 * the hidden fields of the last form. The Chromium suite (test/e2e/browser.test.ts) is the real one;
 * this one lets the checklist suites drive login and consent quickly and see every status and header.
 */
import { expect } from 'vitest'

export interface PageResponse {
  status: number
  headers: Headers
  text: string
  /** The Location header, resolved against the request URL. */
  location?: string
}

export class FormBrowser {
  readonly cookies = new Map<string, string>()
  constructor(readonly base: string) {}

  private url(pathOrUrl: string): string {
    return new URL(pathOrUrl, this.base).toString()
  }

  async request(pathOrUrl: string, init: RequestInit = {}): Promise<PageResponse> {
    const url = this.url(pathOrUrl)
    const cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ')
    const res = await fetch(url, {
      ...init,
      redirect: 'manual',
      headers: { ...(cookie !== '' && { cookie }), ...(init.headers as Record<string, string> | undefined) },
    })
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(';', 1)
      const eq = pair!.indexOf('=')
      const name = pair!.slice(0, eq)
      const value = pair!.slice(eq + 1)
      if (value === '' || /max-age=0|expires=thu, 01 jan 1970/i.test(line)) this.cookies.delete(name)
      else this.cookies.set(name, value)
    }
    const location = res.headers.get('location')
    return { status: res.status, headers: res.headers, text: await res.text(), ...(location !== null && { location: new URL(location, url).toString() }) }
  }

  get(pathOrUrl: string): Promise<PageResponse> {
    return this.request(pathOrUrl)
  }

  post(pathOrUrl: string, form: Record<string, string>): Promise<PageResponse> {
    return this.request(pathOrUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(form).toString(),
    })
  }
}

/** The value of a hidden (or any) input named `name` in a page. */
export function field(page: PageResponse, name: string): string {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(page.text)
  if (!match) throw new Error(`no field ${name} in:\n${page.text.slice(0, 2000)}`)
  return match[1]!.replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&#39;/g, '\'').replace(/&lt;/g, '<').replace(/&gt;/g, '>')
}

/** A-14, G-04: the headers every page and redirect of the embedded server carries. */
export function expectPageHeaders(res: PageResponse): void {
  expect(res.headers.get('x-frame-options')).toBe('DENY')
  expect(res.headers.get('content-security-policy')).toContain('frame-ancestors \'none\'')
  expect(res.headers.get('referrer-policy')).toBe('no-referrer')
  expect(res.headers.get('cache-control')).toBe('no-store')
}

export interface Credentials { username: string; password: string }

/**
 * From a login page (or a redirect to one) through to the client: logs in, answers consent if asked, and
 * returns the final response (a redirect to the client, normally).
 */
export async function loginAndConsent(browser: FormBrowser, start: PageResponse, user: Credentials,
  consent: { decision?: 'allow' | 'deny'; remember?: boolean } = {}): Promise<PageResponse> {
  let res = start
  if (res.location?.includes('/login?')) res = await browser.get(res.location)
  if (res.text.includes('name="password"')) {
    res = await browser.post('/login', { _csrf: field(res, '_csrf'), interaction: field(res, 'interaction'), ...user })
  }
  if (res.location?.includes('/consent?')) {
    const page = await browser.get(res.location)
    res = await browser.post('/consent', {
      _csrf: field(page, '_csrf'), interaction: field(page, 'interaction'), decision: consent.decision ?? 'allow',
      ...(consent.remember && { remember: '1' }),
    })
  }
  return res
}

/** The parameters of a redirect to the client (query, or fragment when `fragment`). */
export function responseParams(location: string | undefined, fragment = false): URLSearchParams {
  if (location === undefined) throw new Error('no redirect')
  const url = new URL(location)
  return new URLSearchParams(fragment ? url.hash.slice(1) : url.search)
}
