/**
 * Progress where people look (issue 28, item 3): a real job whose script draws a plain tqdm bar
 * (no total given to em) and logs its loss. The cell's widget shows the bar with step/total and
 * ETA, read off the rank-0 log, and a sparkline of the loss; the sidebar row shows the bar too.
 * Once the job ends the bar goes (nothing stale) and the sparkline stays. Light and dark theme.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { runCells } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true });

const CELL = [
  '%%distrun --gpus 1 --name uitqdm',
  'import time',
  'from tqdm import tqdm',
  'from jupyter_disttrain import em',
  'run = em.create_run("plain")',
  'for i in tqdm(range(100), desc="train", mininterval=0):',
  '    run.log("train", {"loss": 1.0 / (i + 1)}, step=i)',
  '    time.sleep(0.2 if i < 40 else 600)'
].join('\n');

test('a plain tqdm script shows its progress in the cell and the sidebar', async ({
  page,
  tmpPath
}) => {
  const run = runCells(page, tmpPath, 'tqdm.ipynb', ['%load_ext jupyter_disttrain', CELL]);

  const cellView = page.locator('.jp-DistTrainCellView');
  const bar = cellView.locator('.jp-DistTrain-progress');
  await expect(bar).toContainText(/\d+\/100 \(\d+%\)/, { timeout: 120000 });
  await expect(bar).toContainText('train');
  await expect(bar).toContainText(/3\d\/100|40\/100/, { timeout: 60000 }); // stalled at 40
  await expect(cellView.locator('.jp-DistTrain-sparkline polyline')).toHaveCount(1);
  await expect(cellView.locator('.jp-DistTrain-sparkline')).toContainText('train/loss');

  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uitqdm' });
  const rowBar = row.locator('.jp-DistTrainPanel-progress');
  await expect(rowBar).toContainText(/step \d+ \/ 100/);
  await expect(rowBar.locator('[role="progressbar"]')).toHaveAttribute('aria-valuemax', '100');
  await page.screenshot({ path: path.join(SHOTS, 'progress.png') });
  await page.theme.setDarkTheme();
  await expect(rowBar).toBeVisible();
  await page.screenshot({ path: path.join(SHOTS, 'progress-dark.png') });
  await page.theme.setLightTheme();

  await cellView.locator('.jp-DistTrain-cellCancel').click();
  await page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-warn').click();
  await run;
  await expect(cellView).toContainText('Cancelled');
  await expect(bar).toHaveCount(0); // an ended job has no bar
  await expect(cellView.locator('.jp-DistTrain-sparkline polyline')).toHaveCount(1);
  await expect(rowBar).toHaveCount(0);
});
