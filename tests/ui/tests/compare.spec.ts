/**
 * Runs compared in pictures: a real job with two runs of different learning rates, both
 * selected in the Runs view, give one chart with a line per run and a legend naming both, the
 * learning rate against the final loss with a dot per run, and a table whose hparam columns
 * are the ones that differ (the identical one hidden until asked for), its metrics in view at
 * 1440x900. In the light and the dark theme.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { finishedJob } from './jobs';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true, viewport: { width: 1440, height: 900 } });
test.describe.configure({ timeout: 300 * 1000 }); // a real job first, on a shared machine

const SWEEP = `
from jupyter_disttrain import em
for lr in (0.1, 0.01):
    run = em.create_run(f"lr-{lr}", hparams={"lr": lr, "layers": 2, "optimizer": "sgd"})
    loss = 1.0
    for step in range(8):
        loss *= 1 - lr * 5
        run.log("train", {"loss": loss}, step=step, epoch=step // 4)
    run.finish()
`;

test('two runs compared: overlaid curves, lr against the final loss, differing hparams', async ({
  page,
  request
}) => {
  const id = await finishedJob(request, 'uicompare', SWEEP);
  const panel = await openPanel(page);
  await panel.locator('button.jp-DistTrainPanel-runs').click();
  const view = page.locator('.jp-DistTrainRuns');
  await view.locator('.jp-DistTrainRuns-filter').fill('uicompare');
  const rows = view.locator('tbody tr');
  await expect(rows).toHaveCount(2);
  const compare = view.locator('.jp-DistTrainCompare');
  await expect(compare).toContainText('Select runs');
  for (const name of ['lr-0.1', 'lr-0.01']) {
    await view.locator(`tbody tr[data-run="${id}/${name}"] input[type="checkbox"]`).check();
  }

  // one chart, a (smoothed) line per run, the legend naming both
  const lines = compare.locator('.jp-mod-lines svg path.jp-DistTrainCompare-line');
  await expect(lines).toHaveCount(2);
  await expect(compare.locator('select[name="metric"]')).toHaveValue('train/loss');
  for (const d of await lines.evaluateAll(ps => ps.map(p => p.getAttribute('d')!))) {
    expect(d.split('L')).toHaveLength(8); // every step of the run
  }
  await expect(compare.locator('.jp-DistTrainCompare-legend li')).toHaveText(['lr-0.1', 'lr-0.01']);
  // smoothing off: the lines are the raw ones (no faint copy behind)
  const smoothed = await lines.first().getAttribute('d');
  await compare.locator('.jp-DistTrainCompare-smoothing').fill('0');
  await expect(compare.locator('.jp-DistTrainCompare-raw')).toHaveCount(0);
  expect(await lines.first().getAttribute('d')).not.toBe(smoothed);
  // x by epoch: two epochs, the line from the first to the second
  await compare.locator('select[name="x"]').selectOption('epoch');
  await expect(compare.locator('.jp-mod-lines svg')).toHaveAttribute(
    'aria-label',
    'train/loss against epoch, 2 runs'
  );
  await compare.locator('select[name="x"]').selectOption('step');

  // the learning rate against the final loss: a dot per run
  const dots = compare.locator('.jp-mod-dots svg circle.jp-DistTrainCompare-dot');
  await expect(compare.locator('select[name="hparam"]')).toHaveValue('lr');
  await expect(compare.locator('select[name="final"]')).toHaveValue('train/loss');
  await expect(dots).toHaveCount(2);
  await expect(dots.locator('title')).toHaveText([/^lr-0.1: lr=0.1, /, /^lr-0.01: lr=0.01, /]);
  // the run with the larger final loss (lr 0.01) is higher up
  const [cy1, cy2] = await dots.evaluateAll(cs => cs.map(c => Number(c.getAttribute('cy'))));
  expect(cy2).toBeLessThan(cy1);

  // the table: lr differs and is shown, layers and optimizer do not and are hidden
  await expect(view.locator('thead th[data-column="hp:lr"]')).toBeVisible();
  await expect(view.locator('thead th[data-column="hp:layers"]')).toHaveCount(0);
  await expect(view.locator('thead th[data-column="hp:optimizer"]')).toHaveCount(0);
  await expect(view.locator('.jp-DistTrainRuns-allHparams')).toContainText('2 the same hidden');
  // the metric column is in view without scrolling sideways
  const metric = view.locator('thead th[data-column="m:train/loss"]');
  const box = (await metric.boundingBox())!;
  expect(box.x + box.width).toBeLessThanOrEqual(1440);
  const scroller = view.locator('.jp-DistTrainRuns-scroller');
  expect(await scroller.evaluate(el => el.scrollWidth <= el.clientWidth)).toBe(true);
  await page.screenshot({ path: path.join(SHOTS, 'runs-compare.png') });

  // the toggle shows every hparam
  await view.locator('.jp-DistTrainRuns-allHparams input').check();
  await expect(view.locator('thead th[data-column="hp:layers"]')).toBeVisible();
  await view.locator('.jp-DistTrainRuns-allHparams input').uncheck();
  await expect(view.locator('thead th[data-column="hp:layers"]')).toHaveCount(0);

  // dark theme: the runs keep distinct theme colours, the lines the theme's brand colour first
  await page.theme.setDarkTheme();
  const colours = await lines.evaluateAll(ps => ps.map(p => getComputedStyle(p).stroke));
  expect(new Set(colours).size).toBe(2);
  const brand = await page.evaluate(() =>
    getComputedStyle(document.body).getPropertyValue('--jp-brand-color1').trim()
  );
  expect(brand).not.toBe('');
  const legendSwatch = compare.locator('.jp-DistTrainCompare-swatch').first();
  expect(await legendSwatch.evaluate(el => getComputedStyle(el).backgroundColor)).toBe(colours[0]);
  await page.screenshot({ path: path.join(SHOTS, 'runs-compare-dark.png') });
  await page.theme.setLightTheme();
});
