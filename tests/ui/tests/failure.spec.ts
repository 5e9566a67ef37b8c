/**
 * A failure read as the notebook's own error (issue 28, items 1 and 2): a real two-rank job
 * whose rank 1 raises in a helper defined in an earlier cell. The cell's error is the mapped
 * traceback (`Cell In[n], line m`, none of the product's frames); the sidebar row carries the
 * headline only; the details show the mapped traceback with the raw one a click away, rank-1
 * as the failed replica and rank-0 "stopped by rank-1", quieter. Light and dark theme.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { runCells } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true });

const HELPER = [
  'def check(rank):',
  '    if rank == 1:',
  "        raise ValueError(f'bad rank {rank}')"
].join('\n');

const CELL = [
  '%%distrun --gpus 2 --name uiraise',
  'import os, time',
  'import torch.distributed as dist',
  'dist.init_process_group("gloo")',
  'dist.barrier()',
  'check(dist.get_rank())',
  'time.sleep(120)'
].join('\n');

test("a failing rank's traceback reads like the notebook's own error", async ({
  page,
  tmpPath
}) => {
  await runCells(page, tmpPath, 'raise.ipynb', ['%load_ext jupyter_disttrain', HELPER, CELL]);

  // The cell's error: the raise in cell 2 (its line 3) called from cell 3 (its line 6)
  const error = page.locator(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
  );
  await expect(error).toContainText('Cell In[3], line 6', { timeout: 180000 });
  await expect(error).toContainText('Cell In[2], line 3, in check()');
  await expect(error).toContainText('ValueError: bad rank 1');
  await expect(error).not.toContainText('worker.py');
  await expect(error).not.toContainText('runpy');
  await expect(error).not.toContainText('train.py');

  // The sidebar row: the one-line headline, no traceback
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uiraise' });
  const reason = row.locator('.jp-DistTrainPanel-reason');
  await expect(reason).toContainText('rank-1');
  await expect(reason).not.toContainText('Traceback');

  // The details: headline, mapped traceback, the raw one behind a click, the root cause marked
  await row.locator('button[data-action="details"]').click();
  const details = page.locator('.jp-DistTrainDetails');
  await expect(details.locator('.jp-DistTrainDetails-reason.jp-mod-failed')).toHaveText(
    'rank-1: ValueError: bad rank 1 (In [2], line 3)'
  );
  const mapped = details.locator('.jp-DistTrainDetails-traceback');
  await expect(mapped).toContainText('Cell In[2], line 3, in check()');
  await expect(mapped).not.toContainText('worker.py');
  const raw = details.locator('.jp-DistTrainDetails-raw');
  await expect(raw.locator('pre')).toBeHidden();
  await raw.locator('summary').click();
  await expect(raw.locator('pre')).toContainText('train.py');

  const replicas = details.locator('.jp-DistTrainDetails-replicas');
  await expect(replicas.locator('tr.jp-mod-cause')).toContainText('rank-1');
  const peer = replicas.locator('tr.jp-mod-stoppedByPeer');
  await expect(peer).toContainText('rank-0');
  await expect(peer.locator('.jp-DistTrain-stoppedByPeer')).toHaveText('Stopped by rank-1');
  const colours = await replicas.evaluate(t => ({
    cause: getComputedStyle(t.querySelector('tr.jp-mod-cause .jp-DistTrain-badge')!)
      .backgroundColor,
    peer: getComputedStyle(t.querySelector('tr.jp-mod-stoppedByPeer .jp-DistTrain-badge')!)
      .backgroundColor
  }));
  expect(colours.peer).not.toBe(colours.cause);
  await details.screenshot({ path: path.join(SHOTS, 'failure-details.png') });

  await page.theme.setDarkTheme();
  await expect(mapped).toBeVisible();
  const dark = await mapped.evaluate(el => getComputedStyle(el).backgroundColor);
  expect(dark).not.toBe('rgb(255, 255, 255)');
  await details.screenshot({ path: path.join(SHOTS, 'failure-details-dark.png') });
  await page.theme.setLightTheme();
});
