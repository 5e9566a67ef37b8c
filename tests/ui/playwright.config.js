/**
 * Galata + Playwright against a real JupyterLab, in Debian's /usr/bin/chromium (no
 * Playwright browser download). JLAB_PORT / JLAB_TOKEN / DISTTRAIN_JOB_ROOT come from run.sh,
 * which picks them before Playwright starts: the runner and its workers both evaluate this
 * file, and must agree.
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const PORT = process.env.JLAB_PORT;
const TOKEN = process.env.JLAB_TOKEN;
if (!PORT || !TOKEN || !process.env.DISTTRAIN_JOB_ROOT) {
  throw new Error('set JLAB_PORT, JLAB_TOKEN and DISTTRAIN_JOB_ROOT: run tests/ui/run.sh');
}

module.exports = {
  ...baseConfig,
  testDir: './tests',
  outputDir: './test-results',
  reporter: [['list']],
  workers: 1,
  // No retries, and one failure never stops the run (no serial mode, no maxFailures): every
  // test reports its own result.
  retries: 0,
  maxFailures: 0,
  timeout: 240 * 1000,
  expect: { timeout: 60 * 1000 },
  use: {
    ...baseConfig.use,
    video: 'off',
    trace: 'off',
    viewport: { width: 1400, height: 850 },
    baseURL: `http://127.0.0.1:${PORT}`,
    extraHTTPHeaders: { Authorization: `token ${TOKEN}` },
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync'
      ]
    }
  },
  webServer: {
    command: 'jupyter lab --config jupyter_server_test_config.py',
    url: `http://127.0.0.1:${PORT}/api`,
    timeout: 120 * 1000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe'
  }
};
