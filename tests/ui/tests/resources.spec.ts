/**
 * "Which rank is stuck?" in the job details: a real two-rank job whose rank 0 burns CPU and
 * rank 1 sleeps in `stuck_here` after one line; the Resources section draws their series, the stuck rank is
 * flagged quiet (in the details and on the job's row in the sidebar), and its Stack button shows
 * a stack naming `stuck_here`.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { showTab } from './details';
import { notebook } from './notebook';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

const STUCK = `%%distrun --gpus 2 --name uistuck --detach
import os
import time

def burn():  # busy, and talking like a training loop: never quiet
    end = time.time() + 600
    while time.time() < end:
        tick = time.time() + 1
        while time.time() < tick:
            sum(range(20000))
        print(f"step at {time.time():.0f}", flush=True)

def stuck_here():
    print("rank 1 waits forever", flush=True)
    time.sleep(600)

if os.environ["RANK"] == "0":
    burn()
else:
    stuck_here()`;

test("the details show each rank's resources, flag the stuck rank and dump its stack", async ({
  page,
  tmpPath
}) => {
  await page.contents.uploadContent(
    notebook(['%load_ext jupyter_disttrain', STUCK]),
    'text',
    `${tmpPath}/stuck.ipynb`
  );
  await page.notebook.openByPath(`${tmpPath}/stuck.ipynb`);
  await page.notebook.activate('stuck.ipynb');
  await page.notebook.run();

  const panel = page.locator('#jp-disttrain-sidebar');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
  }
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uistuck' });
  const phase = row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)');
  await expect(phase).toHaveText('Running');
  await row.locator('button[data-action="details"]').click();
  const details = page.locator('.jp-DistTrainDetails');

  // --- a CPU sparkline per rank, and rank 0's current CPU in the replica table
  const grid = details.locator('.jp-DistTrainResources-grid');
  const cpu0 = grid.locator('tr[data-replica="rank-0"] [data-measure="cpu"]');
  await expect(cpu0.locator('path.jp-DistTrainSpark-line')).toHaveCount(1);
  await expect(grid.locator('tr[data-replica="rank-1"] [data-measure="memory"] svg')).toHaveCount(
    1
  );
  // no GPU here: no GPU sparklines at all (not flat zero lines)
  await expect(grid.locator('[data-measure="gpu"]')).toHaveCount(0);
  const table = details.locator('.jp-DistTrainDetails-replicas');
  await expect(table.locator('thead')).toContainText('CPU');
  const rank0 = table.locator('tr[data-replica="rank-0"]');
  // the burning rank reads busy (how busy depends on the machine's load: 15-100 % of a core
  // on a shared 2-core box), the sleeping one idle
  const cpuOf = async (tr: typeof rank0) =>
    parseFloat((await tr.locator('td[data-column="CPU"]').textContent()) ?? '');
  await expect.poll(() => cpuOf(rank0), { timeout: 60000 }).toBeGreaterThan(10);
  await expect.poll(() => cpuOf(table.locator('tr[data-replica="rank-1"]'))).toBeLessThan(5);
  await expect(rank0.locator('td[data-column="Memory"]')).toHaveText(/(KB|MB|GB)$/);

  // --- the stuck rank gets the quiet badge once the sampler marks it
  const rank1 = table.locator('tr[data-replica="rank-1"]');
  await expect(rank1.locator('.jp-DistTrain-quiet')).toBeVisible({ timeout: 180000 });
  await expect(rank0.locator('.jp-DistTrain-quiet')).toHaveCount(0);
  // the sparklines are on the Resources tab of the job's panel
  const jobId = (await row.getAttribute('data-job-id'))!;
  await showTab(page, jobId, 'resources');
  await expect(grid.locator('tr[data-replica="rank-1"] .jp-DistTrain-quiet')).toBeVisible();
  await details.locator('.jp-DistTrainResources').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'resources.png') });

  // --- the job's row in the sidebar is flagged too, its tooltip naming the rank
  const rowQuiet = row.locator('.jp-DistTrain-quiet');
  await expect(rowQuiet).toBeVisible({ timeout: 60000 });
  await expect(rowQuiet).toHaveAttribute('title', /^rank-1 has had no output or progress/);

  // --- the sparklines take their colours from the theme, dark included
  await page.theme.setDarkTheme();
  const colours = await page.evaluate(() => {
    const probe = document.createElement('div');
    probe.style.background = 'var(--jp-layout-color2)';
    probe.style.color = 'var(--jp-brand-color1)';
    document.body.append(probe);
    const theme = getComputedStyle(probe);
    const spark = document.querySelector('.jp-DistTrainSpark-cpu')!;
    const result = {
      background: theme.backgroundColor,
      brand: theme.color,
      spark: getComputedStyle(spark).backgroundColor,
      line: getComputedStyle(spark.querySelector('.jp-DistTrainSpark-line')!).stroke
    };
    probe.remove();
    return result;
  });
  expect(colours.spark).toBe(colours.background);
  expect(colours.line).toBe(colours.brand);
  expect(colours.spark).not.toBe('rgb(238, 238, 238)'); // the light theme's
  await page.theme.setLightTheme();

  // --- its Stack button (in the replica table, on the Overview tab) shows where it is stuck
  await showTab(page, jobId, 'overview');
  await rank1.locator('.jp-DistTrainDetails-stack').click();
  const dialog = page.locator('.jp-Dialog');
  const stack = dialog.locator('.jp-DistTrainStack-text');
  await expect(stack).toContainText('stuck_here', { timeout: 60000 });
  await expect(dialog.locator('.jp-DistTrainStack-status')).toContainText(
    /taken with (py-spy|faulthandler)/
  );
  await expect(dialog.locator('.jp-DistTrainStack-copy')).toBeVisible();
  // named by the cell and its line as JupyterLab shows them, the product's frames folded; the
  // dump as taken one click away
  await expect(stack).toContainText(/Cell In\[2\], line 15, in stuck_here/);
  await expect(stack).not.toContainText('worker.py');
  await dialog.locator('.jp-DistTrainStack-raw summary').click();
  await expect(dialog.locator('.jp-DistTrainStack-rawText')).toContainText('train.py');
  await page.screenshot({ path: path.join(SHOTS, 'stack.png') });
  await dialog.locator('.jp-Dialog-button.jp-mod-accept').click();

  // --- cancelled: the stack action goes, the series stop
  await row.locator('button[data-action="cancel"]').click();
  await page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-warn').click();
  await expect(phase).toHaveText('Cancelled');
  await expect(row.locator('.jp-DistTrain-quiet')).toHaveCount(0);
  await expect(table.locator('.jp-DistTrainDetails-stack')).toHaveCount(0);
  // nothing stale: no CPU % as if it were current, the last output at its time (not counting on)
  await expect(rank0.locator('td[data-column="CPU"]')).toHaveText('–');
  await expect(rank0.locator('td[data-column="Last output"]')).not.toContainText('ago');
  await expect(
    grid.locator('tr[data-replica="rank-0"] [data-measure="cpu"] .jp-DistTrainResources-value')
  ).toHaveText('ended');
});
