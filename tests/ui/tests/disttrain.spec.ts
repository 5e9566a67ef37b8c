/**
 * The UI end to end: a real JupyterLab, a real `%%distrun --gpus 2` job (local backend, two
 * CPU ranks under torchrun), real TensorBoard behind the server's proxy.
 */
import { expect, galata, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { showTab } from './details';
import { notebook } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';
const JOB_ROOT = process.env.DISTTRAIN_JOB_ROOT!;

test.use({ autoGoto: true });

const TRAIN = `%%distrun --gpus 2 --name uitest
import os
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"hello from rank {rank} of {dist.get_world_size()}", flush=True)
for pct in range(0, 101, 5):  # drawn like tqdm: "\\r" + bar, a newline when done
    print(f"\\rprogress {pct}%", end="", flush=True)
print("", flush=True)
if rank == 0:
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(os.environ["DISTTRAIN_TENSORBOARD_DIR"])
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)`;

// Writes one more point, under a new tag, into a job's TensorBoard dir (as training would).
const WRITE_POINT = `
import sys
from torch.utils.tensorboard import SummaryWriter
w = SummaryWriter(sys.argv[1])
w.add_scalar("eval/accuracy", 0.9, 5)
w.close()
`;

async function runNotebook(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  name: string,
  cells: string[]
) {
  await page.contents.uploadContent(notebook(cells), 'text', `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);
  return page.notebook.run();
}

test('a %%distrun job shows in the panel, logs, details and TensorBoard', async ({
  page,
  tmpPath
}) => {
  // the cell follows the job until it ends, so run() returns once it has succeeded
  await runNotebook(page, tmpPath, 'train.ipynb', ['%load_ext jupyter_disttrain', TRAIN]);
  const cellView = page.locator('.jp-DistTrainCellView');
  await expect(cellView).toContainText('Succeeded');
  await expect(cellView).toContainText('[rank1] rank 1 done');
  await page.screenshot({ path: path.join(SHOTS, 'cell.png') });

  // --- a notification says it succeeded; its action opens the logs
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'Job uitest succeeded' });
  await expect(toast).toBeVisible();
  await toast.getByRole('button', { name: 'Open logs' }).click();
  await expect(page.locator('.jp-DistTrainLog')).toBeVisible();

  // --- sidebar
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uitest' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Succeeded');
  await expect(row.locator('.jp-DistTrainPanel-meta')).toContainText('local');
  const jobId = (await row.getAttribute('data-job-id'))!;
  expect(jobId).toMatch(/^uitest-/);
  await page.screenshot({ path: path.join(SHOTS, 'panel.png') });

  // --- logs: both ranks, prefixed; each progress bar is one line, not 21
  await row.locator('button[data-action="logs"]').click(); // the tab opened above, brought to front
  const log = page.locator('.jp-DistTrainLog');
  await expect(
    log.locator('.jp-DistTrainLog-row', { hasText: '[rank0] hello from rank 0 of 2' })
  ).toBeVisible();
  await expect(
    log.locator('.jp-DistTrainLog-row', { hasText: '[rank1] hello from rank 1 of 2' })
  ).toBeVisible();
  await expect(log.locator('.jp-DistTrainLog-row', { hasText: 'progress' })).toHaveCount(2);
  await expect(log.locator('.jp-DistTrainLog-row', { hasText: 'progress 100%' })).toHaveCount(2);
  await page.screenshot({ path: path.join(SHOTS, 'logs.png') });
  // the download holds the full raw log of both ranks
  const download = page.waitForEvent('download');
  await log.locator('.jp-DistTrainLog-download').click();
  const file = await (await download).path();
  const text = fs.readFileSync(file, 'utf-8');
  expect(text).toContain('hello from rank 0 of 2\n');
  expect(text).toContain('hello from rank 1 of 2\n');
  expect(text).toContain('progress 100%');
  await log.locator('.jp-DistTrainLog-filter').fill('done');
  await expect(log.locator('.jp-DistTrainLog-row')).toHaveCount(2);
  await expect(log.locator('.jp-DistTrainLog-status')).toContainText('2 of');

  // --- details: replicas and the packaged script in JupyterLab's editor
  await row.locator('button[data-action="details"]').click();
  const details = page.locator('.jp-DistTrainDetails');
  await expect(details.locator('.jp-DistTrainDetails-replicas tbody tr')).toHaveCount(2);
  await expect(details).toContainText('--nproc-per-node 2');
  await expect(details).toContainText('worker ×2'); // the job's roles, as its launcher laid them out
  await expect(details.locator('.jp-DistTrainDetails-replicas tbody tr').first()).toContainText(
    'worker'
  );
  await expect(details.locator('.jp-DistTrainDetails-script .cm-content')).toHaveAttribute(
    'aria-readonly',
    'true'
  );
  await page.screenshot({ path: path.join(SHOTS, 'details.png') });
  // the script is on the Spec and script tab; CodeMirror draws the lines in view: scroll its
  // scroller down to the cell's code
  await showTab(page, jobId, 'spec');
  await details.locator('.jp-DistTrainDetails-script .cm-scroller').evaluate(el => {
    el.scrollTop = el.scrollHeight;
  });
  await expect(details.locator('.jp-DistTrainDetails-script .cm-content')).toContainText(
    'hello from rank'
  );

  // --- TensorBoard through the proxy, then a new point shows up with no click
  await row.locator('button[data-action="tensorboard"]').click();
  const tab = page.locator('.jp-DistTrainTensorBoard');
  await expect(tab.locator('.jp-DistTrainTensorBoard-auto input[type="checkbox"]')).toBeChecked();
  const frame = page.frameLocator('.jp-DistTrainTensorBoard iframe');
  await expect(frame.getByText('train/loss').first()).toBeVisible();

  execFileSync('python', ['-c', WRITE_POINT, path.join(JOB_ROOT, jobId, 'tensorboard')]);
  const written = Date.now(); // the writer has closed its file
  // TensorBoard lists the new tag's group (collapsed) once its data was reloaded
  const group = frame.getByText('eval', { exact: true });
  await expect(group).toBeVisible();
  // a figure, not an assertion (timing belongs to bench/): how long until it was on screen
  console.log(
    `new TensorBoard point visible ${((Date.now() - written) / 1000).toFixed(1)} s after it was written`
  );
  await group.click();
  await expect(frame.getByText('eval/accuracy').first()).toBeVisible();
  await page.screenshot({ path: path.join(SHOTS, 'tensorboard.png') });

  // --- reloading JupyterLab restores the sidebar and the tabs, TensorBoard included
  await page.reload({ waitForIsReady: false }); // the restored tab, not the launcher, is in front
  await expect(page.locator('#jupyterlab-splash')).toHaveCount(0);
  const tabs = page.locator('.jp-mod-left, .lm-DockPanel-tabBar').locator('.lm-TabBar-tab');
  await expect(tabs.filter({ hasText: `TensorBoard: ${jobId}` })).toHaveCount(1);
  // the job's one panel (its logs are a tab of it)
  await expect(tabs.filter({ hasText: 'Job: uitest' })).toHaveCount(1);
  await expect(tabs.filter({ hasText: 'Logs: uitest' })).toHaveCount(0);
  await expect(page.locator('#jp-disttrain-sidebar')).toBeVisible();
  await expect(frame.getByText('train/loss').first()).toBeVisible();

  // --- TensorBoard of all jobs: this job's run is listed by its id
  await panel
    .locator('.jp-DistTrainPanel-header button[aria-label="TensorBoard for all jobs"]')
    .click();
  const all = page.frameLocator('#jp-disttrain-tensorboard-_all iframe');
  await expect(all.getByText(jobId).first()).toBeVisible();
});

test('a running job is cancelled from the panel', async ({ page, tmpPath }) => {
  await runNotebook(page, tmpPath, 'long.ipynb', [
    '%load_ext jupyter_disttrain',
    '%%distrun --gpus 2 --name uicancel --detach\nimport time\nprint("sleeping", flush=True)\ntime.sleep(600)'
  ]);
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uicancel' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Running');
  await row.locator('button[data-action="cancel"]').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('logs and files are kept');
  await dialog.locator('.jp-Dialog-button.jp-mod-warn').click();
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Cancelled');
  await expect(row.locator('button[data-action="cancel"]')).toHaveCount(0);

  // delete: the confirmation says the files stay; the job leaves the list
  await row.locator('button[data-action="delete"]').click();
  await expect(dialog).toContainText('are kept on disk');
  await dialog.locator('.jp-Dialog-button.jp-mod-warn').click();
  await expect(row).toHaveCount(0);
});

test('a failed job is flagged with its reason and a notification with its logs', async ({
  page,
  tmpPath
}) => {
  await runNotebook(page, tmpPath, 'fail.ipynb', [
    '%load_ext jupyter_disttrain',
    // The barrier: both ranks have printed (and flushed) before either exits; without it,
    // rank 0's exit could get rank 1 stopped before it printed
    [
      '%%distrun --gpus 2 --name uifail --detach',
      'import sys',
      'import torch.distributed as dist',
      'dist.init_process_group("gloo")',
      'print("about to fail", flush=True)',
      'dist.barrier()',
      'sys.exit(3)'
    ].join('\n')
  ]);
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'Job uifail failed' });
  await expect(toast).toBeVisible();
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uifail' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Failed');
  await expect(row.locator('.jp-DistTrainPanel-reason.jp-mod-failed')).toBeVisible();
  await toast.getByRole('button', { name: 'Open logs' }).click();
  await expect(
    page.locator('.jp-DistTrainLog-row', { hasText: '[rank1] about to fail' })
  ).toBeVisible();
  await row.locator('button[data-action="details"]').click();
  await expect(page.locator('.jp-DistTrainDetails-replicas')).toContainText('3');
});

test('the Cancel button under a running cell cancels at once', async ({ page, tmpPath }) => {
  const run = runNotebook(page, tmpPath, 'incell.ipynb', [
    '%load_ext jupyter_disttrain',
    '%%distrun --gpus 2 --name uicell\nimport time\nprint("sleeping", flush=True)\ntime.sleep(600)'
  ]);
  const cellView = page.locator('.jp-DistTrainCellView');
  await expect(cellView).toContainText('Running');
  // each rank chip shows its rank's usage while it runs (the magic reads it through the job layer)
  await expect(cellView.locator('.jp-DistTrain-chipUsage')).toHaveCount(2);
  await expect(cellView.locator('.jp-DistTrain-chipUsage').first()).toHaveText(/^CPU [\d.]+% · /);
  await cellView.locator('.jp-DistTrain-cellCancel').click();
  await page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-warn').click();
  await run; // the cell stops following once the job has ended
  await expect(cellView).toContainText('Cancelled');
  expect(galata).toBeDefined();
});

test('the panel works from the keyboard and follows the dark theme', async ({ page }) => {
  await page.theme.setDarkTheme();
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uitest' });
  // Enter on a job opens its details; Tab reaches its action buttons
  await row.focus();
  await page.keyboard.press('Enter');
  await expect(page.locator('.jp-DistTrainDetails h2')).toHaveText('uitest');
  await row.focus();
  await page.keyboard.press('Tab');
  await expect(row.locator('button[data-action="details"]')).toBeFocused();
  await page.keyboard.press('Tab');
  await expect(row.locator('button[data-action="logs"]')).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.locator('.jp-DistTrainLog-row').first()).toBeVisible();
  const colours = await page.evaluate(() => {
    const probe = document.createElement('div');
    probe.style.background = 'var(--jp-layout-color1)';
    probe.style.color = 'var(--jp-content-font-color1)';
    document.body.append(probe);
    const theme = getComputedStyle(probe);
    const result = {
      themeBackground: theme.backgroundColor,
      themeText: theme.color,
      panel: getComputedStyle(document.querySelector('.jp-DistTrainPanel')!).backgroundColor,
      logText: getComputedStyle(document.querySelector('.jp-DistTrainLog')!).color
    };
    probe.remove();
    return result;
  });
  expect(colours.panel).toBe(colours.themeBackground);
  expect(colours.logText).toBe(colours.themeText);
  expect(colours.panel).not.toBe('rgb(255, 255, 255)');
  await page.screenshot({ path: path.join(SHOTS, 'dark.png') });
  await page.theme.setLightTheme();
});
