/**
 * Debian's Chromium, driven by playwright-core, for test/e2e/browser.test.ts: one browser per file, a
 * fresh context (cookie jar) per test. Without /usr/bin/chromium the suite is skipped, with the reason in
 * its title; under CI it is not: every test fails with the error below, so a runner that lost its
 * browser can never report the suite as passed (or as merely skipped).
 */
import { existsSync } from 'node:fs'
import { afterAll, beforeAll, type TestContext } from 'vitest'
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions } from 'playwright-core'

export const CHROMIUM_PATH = '/usr/bin/chromium'

/** Known to work on a closed network: nothing phones home, no sandbox (containers), no GPU. */
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync']

/** Why the browser suite is skipped here, or undefined when it runs (always, under CI). */
export const chromiumSkipReason: string | undefined = existsSync(CHROMIUM_PATH) || process.env.CI
  ? undefined
  : `${CHROMIUM_PATH} is missing (apt-get install chromium); under CI this is a failure`

export type NewContext = (test: TestContext, options?: BrowserContextOptions) => Promise<BrowserContext>

/**
 * Launches Chromium in the calling describe's beforeAll (playwright gives it a fresh profile) and closes
 * it in afterAll. The returned function opens a context that closes when the test finishes; it throws
 * the launch error, if any, in every test, so each one counts as failed.
 */
export function useChromium(): NewContext {
  let browser: Browser | undefined
  let launchError: Error | undefined
  beforeAll(async () => {
    if (!existsSync(CHROMIUM_PATH)) {
      launchError = new Error(`${CHROMIUM_PATH} is missing: install Debian's chromium (.ci/run does, with apt-get); `
        + 'the browser suite cannot pass without a browser')
      return
    }
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: ARGS })
    } catch (error) {
      launchError = new Error(`${CHROMIUM_PATH} did not start`, { cause: error })
    }
  })
  afterAll(() => browser?.close())
  return async (test, options = {}) => {
    if (!browser) throw launchError ?? new Error('Chromium is not running')
    const context = await browser.newContext(options)
    test.onTestFinished(() => context.close())
    return context
  }
}
