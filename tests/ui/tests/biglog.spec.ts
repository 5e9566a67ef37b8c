/**
 * A million-line log: only visible rows are in the DOM, the whole log loads page by page
 * by offset, and scrolling/filtering work on all of it.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';

import { notebook } from './notebook';

const BIG = `%%distrun --gpus 2 --name uibig --detach
import sys
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
sys.stdout.writelines(f"line {i} of rank {rank}\\n" for i in range(500_000))
sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()`;

async function runCells(page: IJupyterLabPageFixture, tmpPath: string, cells: string[]) {
  await page.contents.uploadContent(notebook(cells), 'text', `${tmpPath}/big.ipynb`);
  await page.notebook.openByPath(`${tmpPath}/big.ipynb`);
  await page.notebook.activate('big.ipynb');
  await page.notebook.run();
}

test('a 1,000,000-line log renders only what is visible and loads by offset', async ({
  page,
  tmpPath
}) => {
  await runCells(page, tmpPath, ['%load_ext jupyter_disttrain', BIG]);
  await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
  const row = page.locator('.jp-DistTrainPanel-job', { hasText: 'uibig' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText(
    'Succeeded',
    { timeout: 180000 }
  );
  await row.locator('button[data-action="logs"]').click();

  const log = page.locator('.jp-DistTrainLog');
  const status = log.locator('.jp-DistTrainLog-status');
  // the default tail: the last 1,000 lines of each rank (and the launcher's notes), read page by
  // page; the first page alone (1,000 lines) is only on screen until the next poll
  await expect(status).toHaveText(/^2,0\d\d lines · ended$/);
  await log.locator('select[aria-label="Tail"]').selectOption('0'); // whole log
  const started = Date.now();
  await expect(status).toHaveText(/^1,000,0\d\d lines · ended$/, { timeout: 180000 });
  console.log(`whole 1,000,000-line log loaded in ${((Date.now() - started) / 1000).toFixed(1)} s`);

  // a handful of rows in the DOM, wherever we are
  const rows = log.locator('.jp-DistTrainLog-row');
  expect(await rows.count()).toBeLessThan(200);
  const viewport = log.locator('.jp-DistTrainLog-viewport');
  await viewport.evaluate(el => {
    el.scrollTop = el.scrollHeight / 2;
  });
  await expect(log.locator('.jp-DistTrainLog-follow')).toHaveText('Paused'); // scrolled up: follow pauses
  await expect(rows.filter({ hasText: /line \d+ of rank/ }).first()).toBeVisible();
  expect(await rows.count()).toBeLessThan(200);

  await log.locator('.jp-DistTrainLog-filter').fill('line 499999 of rank 1');
  await expect(rows).toHaveCount(1);
  await expect(rows).toHaveText('[rank1] line 499999 of rank 1');
  await expect(status).toHaveText(/^1 of 1,000,0\d\d lines/);
});
