/**
 * The TensorBoard tab in a browser that is logged in the way a person is (a cookie, no token
 * header): two writers share one run directory and write alternating points for 20 s; both
 * tags keep gaining points in the tab with no click (TensorBoard follows every event file of
 * a run), and TensorBoard's own POSTs pass Jupyter's XSRF check through the proxy.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import { submit, tensorboardPoint, waitForPhase } from './jobs';
import { openPanel } from './sidebar';

const JOB_ROOT = process.env.DISTTRAIN_JOB_ROOT!;
const TOKEN = process.env.JLAB_TOKEN!;
const SECONDS = 20;
const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

// Step 0 of both tags at once (so the tab has cards to show), then, once the test says go,
// alternating points for SECONDS: writer a, then writer b, every 0.25 s.
const TWO_WRITERS = `
import os, time
from torch.utils.tensorboard import SummaryWriter
run = os.path.join(os.environ["DISTTRAIN_TENSORBOARD_DIR"], "run")
a = SummaryWriter(run, filename_suffix=".a")
b = SummaryWriter(run, filename_suffix=".b")
for w, tag in ((a, "two/a"), (b, "two/b")):
    w.add_scalar(tag, 0.0, 0)
    w.flush()
go = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "go")
end = time.time() + 180
while not os.path.exists(go) and time.time() < end:
    time.sleep(0.1)
step, end = 1, time.time() + ${SECONDS}
while time.time() < end:
    for w, tag in ((a, "two/a"), (b, "two/b")):
        w.add_scalar(tag, float(step), step)
        w.flush()
        time.sleep(0.25)
    step += 1
a.close()
b.close()
print("last step", step - 1, flush=True)
`;

type Seen = { at: number; step: number; wallTime: number };
type Point = { step: number; wallTime: number };

test('both writers of one run keep gaining points in the TensorBoard tab', async ({
  browser,
  baseURL,
  request
}) => {
  const jobId = await submit(request, 'twowriters', TWO_WRITERS);

  // A browser that logged in once with the token URL and holds only Jupyter's cookies (no token
  // header: the config gives every context one unless told otherwise).
  const context = await browser.newContext({
    baseURL,
    viewport: { width: 1400, height: 850 },
    extraHTTPHeaders: {}
  });
  const page = await context.newPage();
  const seen: Record<string, Seen[]> = { 'two/a': [], 'two/b': [] };
  const refused: string[] = [];
  page.on('response', async response => {
    const url = response.url();
    if (!url.includes('/disttrain/tensorboard/')) {
      return;
    }
    if (response.status() === 403) {
      refused.push(`${response.request().method()} ${url}`);
    }
    if (!url.includes('/data/plugin/timeseries/timeSeries') || response.status() !== 200) {
      return;
    }
    const at = Date.now();
    for (const item of await response.json().catch(() => [])) {
      const points = item?.runToSeries?.run;
      if (item?.tag in seen && Array.isArray(points) && points.length) {
        const last = (points as Point[]).reduce((x, y) => (y.step > x.step ? y : x));
        seen[item.tag].push({ at, step: last.step, wallTime: last.wallTime * 1000 });
      }
    }
  });
  await page.goto(`/lab?token=${TOKEN}`);
  await expect(page.locator('#jupyterlab-splash')).toHaveCount(0, { timeout: 120000 });
  expect((await context.cookies()).some(c => c.name.startsWith('username-'))).toBe(true);

  // The sidebar, the job's row, its TensorBoard button: the tab opens with auto-reload on.
  const panel = await openPanel(page);
  const row = panel.locator(`.jp-DistTrainPanel-job[data-job-id="${jobId}"]`);
  await row.locator('button[data-action="tensorboard"]').click();
  const tab = page.locator('.jp-DistTrainTensorBoard');
  await expect(tab.locator('.jp-DistTrainTensorBoard-auto input[type="checkbox"]')).toBeChecked();
  const frame = page.frameLocator('.jp-DistTrainTensorBoard iframe');
  await expect(frame.getByText('two/a').first()).toBeVisible({ timeout: 120000 });
  await expect(frame.getByText('two/b').first()).toBeVisible();

  const started = Date.now();
  fs.writeFileSync(path.join(JOB_ROOT, jobId, 'go'), '');
  // No click from here on: only the tab's auto-reload and TensorBoard's own requests.
  await page.waitForTimeout((SECONDS + 8) * 1000);
  const status = await (await request.get(`/disttrain/api/jobs/${jobId}`)).json();
  expect(status.status.phase).toBe('Succeeded');
  const log = await (
    await request.get(`/disttrain/api/jobs/${jobId}/logs`, { params: { replica: 'rank-0' } })
  ).json();
  const lastStep = Number(
    /last step (\d+)/.exec(log.lines.map((l: { text: string }) => l.text).join('\n'))![1]
  );
  expect(lastStep).toBeGreaterThan(10);

  expect(refused).toEqual([]); // TensorBoard's POSTs carried Jupyter's XSRF token
  for (const [tag, points] of Object.entries(seen)) {
    const during = points.filter(p => p.at > started && p.at < started + SECONDS * 1000);
    const steps = new Set(during.map(p => p.step));
    // it kept gaining points while they were written, and got the last one
    expect(steps.size, `${tag}: ${JSON.stringify(during.map(p => p.step))}`).toBeGreaterThanOrEqual(
      5
    );
    expect(Math.max(...points.map(p => p.step))).toBe(lastStep);
    // a figure, not an assertion (timing belongs to bench/): how old the newest point was
    // when the tab got it, i.e. write-to-screen latency bounded by the reload intervals
    const ages = during
      .filter(p => p.step > 0) // step 0 was written before the test said go
      .map(p => (p.at - p.wallTime) / 1000)
      .sort((x, y) => x - y);
    console.log(
      `${tag}: ${steps.size} new points in ${SECONDS} s; newest point's age on arrival: ` +
        `median ${ages[Math.floor(ages.length / 2)].toFixed(1)} s, max ${ages[ages.length - 1].toFixed(1)} s`
    );
  }
  await context.close();
});

test('TensorBoard follows the dark theme, loads every file through the proxy and opens with its settings closed', async ({
  page,
  request
}) => {
  const jobId = await submit(request, 'tblook', tensorboardPoint('look/loss'));
  await waitForPhase(request, jobId, 'Succeeded');
  // what TensorBoard's page asked for and did not get (its fonts were asked from the site's root)
  const missing: string[] = [];
  page.on('response', response => {
    const url = response.url();
    const fromTensorBoard =
      url.includes('/disttrain/tensorboard/') || response.frame() !== page.mainFrame();
    if (fromTensorBoard && response.status() === 404) {
      missing.push(url);
    }
  });
  await page.theme.setDarkTheme();
  const panel = await openPanel(page);
  const row = panel.locator(`.jp-DistTrainPanel-job[data-job-id="${jobId}"]`);
  await row.locator('button[data-action="tensorboard"]').click();
  const frame = page.frameLocator('.jp-DistTrainTensorBoard iframe');
  await expect(frame.getByText('look/loss').first()).toBeVisible({ timeout: 120000 });
  await expect(frame.locator('body')).toHaveClass(/dark-mode/);
  // its settings pane is closed (its button opens it)
  await expect(frame.locator('metrics-dashboard-right-pane')).toHaveCount(0);
  // its fonts are asked for once the text is drawn: wait for the page to settle
  await page.waitForLoadState('networkidle');
  expect(missing).toEqual([]);
  await page.screenshot({ path: path.join(SHOTS, 'tensorboard-dark.png') });

  // back to the light theme: TensorBoard follows
  await page.theme.setLightTheme();
  await expect(frame.getByText('look/loss').first()).toBeVisible({ timeout: 60000 });
  await expect(frame.locator('body')).not.toHaveClass(/dark-mode/);
  expect(missing).toEqual([]);
});
