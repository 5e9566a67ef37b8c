/**
 * Which rank is stuck, in which collective, at which cell line (issue 38): a real two-rank gloo
 * job whose rank 1 sleeps before all_reduce #5, in a helper of an earlier cell. Its stall guard
 * (a 10 s floor) flags it in the sidebar; Diagnose in the cell's view says the verdict in a
 * notification and in the view; the details show it with each rank's part, a second diagnosis
 * keeps the first as an earlier one, and the resource-hours. Light and dark theme.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import * as path from 'path';

import { jobPanel } from './details';
import { runCells } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true });

const SETUP = 'import time\nimport torch\nimport torch.distributed as dist';
const LATE = ['def late(rank, i):', '    if rank == 1 and i == 4:', '        time.sleep(600)'].join(
  '\n'
);
const CELL = [
  '%%distrun --gpus 2 --name uidiag --stall-floor 10',
  'dist.init_process_group("gloo")',
  'rank = dist.get_rank()',
  't = torch.ones(4)',
  'for i in range(10):',
  '    late(rank, i)',
  '    dist.all_reduce(t)',
  '    print("step", i, flush=True)'
].join('\n');

const VERDICT =
  'rank-1 has not joined all_reduce #5 (default group); it is at Cell In[3], line 3 ' +
  '(`time.sleep(600)`); rank-0 waits in all_reduce at Cell In[4], line 7';

/** Close the notifications (they would cover the views in the screenshots). */
async function dismissToasts(page: IJupyterLabPageFixture) {
  for (const close of await page.locator('.jp-Notification-Toast-Close').all()) {
    await close.click();
  }
  await expect(page.locator('.Toastify__toast')).toHaveCount(0);
}

test('the verdict in the cell and the details, light and dark', async ({ page, tmpPath }) => {
  const run = runCells(page, tmpPath, 'stuck.ipynb', [
    '%load_ext jupyter_disttrain',
    SETUP,
    LATE,
    CELL
  ]);
  const cellView = page.locator('.jp-DistTrainCellView');
  await expect(cellView).toContainText('step 3', { timeout: 180000 });

  // The guard flags it in the sidebar once 10 s pass without progress (rank 0 waits in gloo)
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uidiag' });
  const flagged = row.locator('.jp-DistTrain-guard');
  await expect(flagged).toHaveText('stalled', { timeout: 60000 });
  await expect(flagged).toHaveAttribute(
    'title',
    /^stalled, idle: its processes do nothing; no progress/
  );

  // Diagnose from the cell: a notification, then the verdict in the cell's view
  await cellView.locator('button[data-disttrain-command="disttrain:diagnose"]').click();
  const toast = page.locator('.Toastify__toast', { hasText: 'has not joined all_reduce #5' });
  // (a notification shows its first 140 characters: the cell and the details have it all)
  await expect(toast).toContainText(VERDICT.slice(0, 100), { timeout: 30000 });
  const inCell = cellView.locator('.jp-DistTrainCellView-verdict');
  await expect(inCell).toContainText(VERDICT, { timeout: 30000 });
  await dismissToasts(page);
  await cellView.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'diagnosis-cell.png') });

  // The details: the verdict, each rank's part, the stacks behind a click
  await row.locator('button[data-action="details"]').click();
  const jobId = (await row.getAttribute('data-job-id'))!;
  const details = jobPanel(page, jobId);
  const incident = details.locator('.jp-DistTrainDiagnosis-incident');
  await expect(incident.locator('.jp-DistTrainDiagnosis-verdict')).toHaveText(VERDICT, {
    timeout: 30000
  });
  const rank1 = incident.locator('tr[data-replica="rank-1"]');
  await expect(rank1.locator('td[data-column="State"]')).toHaveText('not joined');
  await expect(rank1.locator('td[data-column="Where"]')).toHaveText('Cell In[3], line 3');
  await expect(rank1.locator('td[data-column="Line"]')).toHaveText('time.sleep(600)');
  const rank0 = incident.locator('tr[data-replica="rank-0"]');
  await expect(rank0.locator('td[data-column="State"]')).toHaveText('waiting');
  await expect(details.locator('.jp-DistTrainDiagnosis-guard')).toContainText('stalled');
  await expect(details.locator('.jp-mod-overview .jp-DistTrainDiagnosis-hours')).toContainText(
    /core-hours allocated, [\d.]+ used/
  );

  // A second diagnosis is another incident: the first is kept, listed as an earlier one
  await details.locator('.jp-DistTrainDiagnosis-run').click();
  const earlier = details.locator('.jp-DistTrainDiagnosis-history');
  await expect(earlier.locator('summary')).toHaveText('1 earlier diagnosis', { timeout: 30000 });
  await details.locator('.jp-DistTrainDiagnosis-stack summary').first().click();
  await expect(details.locator('.jp-DistTrainDiagnosis-stack pre').first()).toContainText(
    'Cell In[4], line 7'
  );
  await incident.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'diagnosis-details.png') });

  // Dark: the verdict in the theme's strongest text colour, its rule in the brand colour
  await page.theme.setDarkTheme();
  const [verdictColour, ruleColour, textColour, brandColour] = await incident.evaluate(box => {
    const swatch = box.ownerDocument.createElement('span');
    box.append(swatch);
    const colour = (css: string) => {
      swatch.style.color = css;
      return getComputedStyle(swatch).color;
    };
    const found = [
      getComputedStyle(box.querySelector('.jp-DistTrainDiagnosis-verdict')!).color,
      getComputedStyle(box).borderLeftColor,
      colour('var(--jp-ui-font-color0)'),
      colour('var(--jp-brand-color1)')
    ];
    swatch.remove();
    return found;
  });
  expect([verdictColour, ruleColour]).toEqual([textColour, brandColour]);
  expect(verdictColour).not.toBe('rgba(0, 0, 0, 0.87)'); // the light theme's
  await page.screenshot({ path: path.join(SHOTS, 'diagnosis-details-dark.png') });
  await page.notebook.activate('stuck.ipynb');
  await cellView.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'diagnosis-cell-dark.png') });
  await page.theme.setLightTheme();

  // Cancelled by the palette's command on it: no Diagnose any more, in the cell or the details
  void page.evaluate(id => window.jupyterapp.commands.execute('disttrain:cancel', { id }), jobId);
  await page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-warn').click();
  await expect(cellView).toContainText('Cancelled', { timeout: 60000 });
  await run;
  await expect(cellView.locator('button[data-disttrain-command="disttrain:diagnose"]')).toHaveCount(
    0
  );
  await row.locator('button[data-action="details"]').click(); // its panel to front: it reads again
  await expect(details.locator('.jp-DistTrainDiagnosis-run')).toHaveCount(0);
  await expect(details.locator('.jp-DistTrainDiagnosis-verdict')).toHaveText(VERDICT); // kept
});
