/**
 * A rank's pdb prompt in the cell's widget (issue 37, item 3): a real two-rank job whose rank 1
 * stops in breakpoint(). The widget shows where it stopped (the cell's line), an input, and
 * rank-0 "waiting for rank-1's debugger"; what is typed goes through the lab extension and the
 * REST API (the kernel is busy following the job), and pdb's answer appears in the transcript.
 * `c` lets the job finish; its --out value comes back into the kernel, and the job's details
 * list it. Light and dark theme.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { runCells } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true });

const CELL = [
  '%%distrun --gpus 2 --name uipdb --out losses',
  'import torch.distributed as dist',
  'dist.init_process_group("gloo")',
  'x = 41 + dist.get_rank()',
  'losses = [0.9, 0.5, 0.25]',
  'if dist.get_rank() == 1:',
  '    breakpoint()',
  '    y = x + 1',
  'dist.barrier()'
].join('\n');

test("a rank's breakpoint opens a pdb prompt in the cell's widget", async ({ page, tmpPath }) => {
  const run = runCells(page, tmpPath, 'pdb.ipynb', [
    '%load_ext jupyter_disttrain',
    CELL,
    'print("losses back:", losses)'
  ]);

  const cellView = page.locator('.jp-DistTrainCellView');
  const transcript = cellView.locator('.jp-DistTrain-debugTranscript');
  const input = cellView.locator('input.jp-DistTrain-debugInput');
  await expect(input).toBeVisible({ timeout: 180000 });
  await expect(cellView.locator('.jp-DistTrain-debug')).toContainText(
    /rank-1 waits in the debugger at In \[2\], line 8/
  );
  await expect(transcript).toContainText(/> In \[2\], line 8 <module>\(\)\s+-> y = x \+ 1/);
  await expect(cellView).toContainText("waiting for rank-1's debugger"); // rank-0's chip

  await input.fill('p x');
  await input.press('Enter');
  await expect(transcript).toContainText(/\(Pdb\) p x\s+42\s+\(Pdb\)/, { timeout: 30000 });
  await input.fill('p [x, x + 1]');
  await input.press('Enter');
  await expect(transcript).toContainText('[42, 43]', { timeout: 30000 });
  await cellView.screenshot({ path: path.join(SHOTS, 'debugger.png') });
  await page.theme.setDarkTheme();
  await expect(transcript).toBeVisible();
  const dark = await transcript.evaluate(el => getComputedStyle(el).backgroundColor);
  expect(dark).not.toBe('rgb(238, 238, 238)');
  await cellView.screenshot({ path: path.join(SHOTS, 'debugger-dark.png') });
  await page.theme.setLightTheme();

  await input.fill('c');
  await input.press('Enter');
  await run;
  await expect(cellView).toContainText('Succeeded');
  await expect(input).toHaveCount(0); // the prompt closed: no input left
  await expect(cellView.locator('.jp-DistTrain-debug')).toContainText('rank-1 left the debugger');
  await expect(page.locator('.jp-OutputArea-output').last()).toContainText(
    'losses back: [0.9, 0.5, 0.25]'
  );

  // The details list the kept value and how to load it again
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uipdb' });
  await row.locator('button[data-action="details"]').click();
  const values = page.locator('.jp-DistTrainDetails-values');
  await expect(values).toContainText('losses');
  await expect(values).toContainText('value list');
  await expect(page.locator('.jp-DistTrainDetails-valuesLoad')).toContainText(
    '%distrun load uipdb-'
  );
});
