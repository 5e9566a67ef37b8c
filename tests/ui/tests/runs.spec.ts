/**
 * Experiment tracking in the UI, with real jobs that use `em`: a `%%distrun --gpus 2` cell of a
 * notebook (hparams, logged points with a NaN and a step that goes back, an artifact) shown in
 * the job details; a job read while it runs (its charts grow); and the Runs view, which sorts,
 * filters and opens the selected runs, and only those, in the all-jobs TensorBoard.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import { showTab } from './details';
import { submit, waitForPhase } from './jobs';
import { notebook } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';
const JOB_ROOT = process.env.DISTTRAIN_JOB_ROOT!;

test.use({ autoGoto: true });

// The artifact: 10 KiB of every byte value, so a download that changed any byte shows.
const ARTIFACT = Buffer.concat(
  Array.from({ length: 40 }, () => Buffer.from([...Array(256).keys()]))
);

// Every rank runs every em call (no `if rank == 0:`); rank 0 records.
const TRAIN = `%%distrun --gpus 2 --name uiruns
import os
import torch.distributed as dist
from jupyter_disttrain import em
dist.init_process_group("gloo")
rank = dist.get_rank()
hparams = {"lr": 0.1, "batch_size": 32, "optimizer": "adam"}
run = em.create_run("mnist", hparams=hparams, total_steps=5)
for step in range(6):
    run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
run.log("train", {"loss": 0.05}, step=3)  # a step that goes back: kept, flagged
run.log("val", {"acc": 0.5, "loss": float("nan")}, step=5)
model = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], f"model-{rank}.pt")
with open(model, "wb") as f:
    f.write(bytes(range(256)) * 40)
ckpt = em.create_artifact("checkpoint")
ckpt.add_file(model, name="model.pt")
run.mark_output(ckpt)
run.finish()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)`;

// Logs step 0, waits for the test's go file, then logs a point every 0.3 s.
const LIVE = `
import os, time
from jupyter_disttrain import em
run = em.create_run("live", hparams={"lr": 0.5})
run.log("train", {"loss": 1.0}, step=0)
go = os.path.join(os.environ["DISTTRAIN_JOB_DIR"], "go")
end = time.time() + 180
while not os.path.exists(go) and time.time() < end:
    time.sleep(0.1)
for step in range(1, 6):
    time.sleep(0.3)
    run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
run.finish()
`;

// Three runs of one job, and a plain TensorBoard writer's run that is not one of em's.
const SWEEP = `
import os
from jupyter_disttrain import em
from torch.utils.tensorboard import SummaryWriter
for lr, loss in ((0.1, 0.3), (0.01, 0.2), (0.001, 0.4)):
    run = em.create_run(f"lr-{lr}", hparams={"lr": lr, "layers": 2})
    for step in range(3):
        run.log("train", {"loss": loss + (2 - step) / 10}, step=step)
    run.finish()
w = SummaryWriter(os.path.join(os.environ["DISTTRAIN_TENSORBOARD_DIR"], "plain"))
w.add_scalar("train/loss", 1.0, 0)
w.close()
`;

/** The computed stroke of an SVG element, and the theme's brand colour. */
function strokeAndBrand(locator: ReturnType<IJupyterLabPageFixture['locator']>) {
  return locator.evaluate(el => {
    const probe = document.createElement('div');
    probe.style.color = 'var(--jp-brand-color1)';
    document.body.append(probe);
    const brand = getComputedStyle(probe).color;
    probe.remove();
    return { stroke: getComputedStyle(el).stroke, brand };
  });
}

test('the job details show a run: hparams, charts, progress and a byte-identical artifact', async ({
  page,
  request,
  tmpPath
}) => {
  test.setTimeout(420 * 1000); // two real jobs, one of them 2 ranks, on a loaded machine
  const liveId = await submit(request, 'uirunslive', LIVE);
  await page.contents.uploadContent(
    notebook(['%load_ext jupyter_disttrain', TRAIN]),
    'text',
    `${tmpPath}/runs.ipynb`
  );
  await page.notebook.openByPath(`${tmpPath}/runs.ipynb`);
  await page.notebook.activate('runs.ipynb');
  await page.notebook.run(); // the cell follows the job until it ends
  await expect(page.locator('.jp-DistTrainCellView')).toContainText('Succeeded');

  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uiruns' }).filter({
    hasNotText: 'uirunslive'
  });
  const jobId = (await row.getAttribute('data-job-id'))!;
  await row.locator('button[data-action="details"]').click();
  await showTab(page, jobId, 'runs'); // the job's panel: its Runs tab
  const run = page.locator('.jp-DistTrainRun[data-run="mnist"]');
  await expect(run.locator('.jp-DistTrain-badge')).toHaveText('finished');

  // hparams as a key/value table
  const hparams = run.locator('.jp-DistTrainRun-hparams');
  await expect(hparams.locator('dt')).toHaveText(['lr', 'batch_size', 'optimizer']);
  await expect(hparams.locator('dd')).toHaveText(['0.1', '32', 'adam']);
  // progress: the last step logged (val's, at 5) of the total
  await expect(run.locator('.jp-DistTrainRun-bar')).toHaveAttribute('aria-valuenow', '5');
  await expect(run.locator('.jp-DistTrainRun-progressText')).toHaveText('step 5 / 5 (100%)');

  // one chart per <type>/<name>; every point once; the step that went back and NaN marked
  const charts = run.locator('.jp-DistTrainChart');
  await expect(charts.locator('.jp-DistTrainChart-name')).toHaveText([
    'train/loss',
    'val/acc',
    'val/loss'
  ]);
  const loss = run.locator('.jp-DistTrainChart[data-metric="train/loss"]');
  await expect(loss.locator('svg')).toHaveAttribute(
    'aria-label',
    'train/loss: 7 points, last 0.05'
  );
  await expect(loss.locator('.jp-DistTrainChart-mark.jp-mod-backwards')).toHaveCount(1);
  const nan = run.locator('.jp-DistTrainChart[data-metric="val/loss"]');
  await expect(nan.locator('.jp-DistTrainChart-value')).toHaveText('NaN');
  await expect(nan.locator('.jp-DistTrainChart-mark.jp-mod-nan')).toHaveCount(1);
  // the line follows the theme: its stroke is the theme's brand colour
  const line = loss.locator('.jp-DistTrainChart-line');
  const light = await strokeAndBrand(line);
  expect(light.stroke).toBe(light.brand);

  // the artifact downloads byte-identical
  const link = run.locator('a.jp-DistTrainRun-download');
  await expect(link).toHaveCount(1);
  await expect(run.locator('.jp-DistTrainRun-artifacts tbody td').nth(1)).toHaveText('model.pt');
  await run.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'run-details.png') });
  const download = page.waitForEvent('download');
  await link.click();
  const file = await (await download).path();
  expect(fs.readFileSync(file).equals(ARTIFACT)).toBe(true);

  // and in the dark theme
  await page.theme.setDarkTheme();
  const dark = await strokeAndBrand(line);
  expect(dark.stroke).toBe(dark.brand);
  expect(dark.stroke).not.toBe(light.stroke);
  await run.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'run-details-dark.png') });
  await page.theme.setLightTheme();

  // the run's button opens the job's TensorBoard on that run
  await run.locator('button.jp-DistTrainRun-tensorboard').click();
  const board = page.frameLocator(`#jp-disttrain-tensorboard-${jobId} iframe`);
  await expect(board.getByText('mnist', { exact: true }).first()).toBeVisible({ timeout: 120000 });
  await expect(board.getByText('train/loss').first()).toBeVisible();

  // a running job: its chart grows as points are logged, with no click, each read going on
  // from where the last ended (since=<offset>); reading stops once the job has ended
  const reads: number[] = [];
  page.on('request', r => {
    const url = new URL(r.url());
    if (url.pathname.endsWith(`/jobs/${liveId}/runs/live`)) {
      reads.push(Number(url.searchParams.get('since') ?? 0));
    }
  });
  await waitForPhase(request, liveId, 'Running');
  await panel
    .locator(`.jp-DistTrainPanel-job[data-job-id="${liveId}"] button[data-action="details"]`)
    .click();
  await showTab(page, liveId, 'runs');
  const live = page.locator('.jp-DistTrainRun[data-run="live"]');
  const liveLoss = live.locator('.jp-DistTrainChart[data-metric="train/loss"] svg');
  await expect(liveLoss).toHaveAttribute('aria-label', /: 1 points/);
  await expect(live.locator('.jp-DistTrain-badge')).toHaveText('running');
  fs.writeFileSync(path.join(JOB_ROOT, liveId, 'go'), '');
  await expect(liveLoss).toHaveAttribute('aria-label', /: 6 points, last 0.1667/);
  await expect(live.locator('.jp-DistTrain-badge')).toHaveText('finished');
  expect(reads[0]).toBe(0);
  expect(Math.max(...reads)).toBeGreaterThan(0);
  await waitForPhase(request, liveId, 'Succeeded');
  await page.waitForTimeout(5000); // the read after the end
  const count = reads.length;
  await page.waitForTimeout(5000); // two refresh intervals
  expect(reads.length).toBe(count);
});

test('the Runs view sorts, filters and opens the selected runs in TensorBoard', async ({
  page,
  request
}) => {
  test.setTimeout(420 * 1000); // a job, then TensorBoard of all jobs starting
  const id = await submit(request, 'uisweep', SWEEP);
  await waitForPhase(request, id, 'Succeeded');

  // the sidebar's button opens the view (the palette command "Open Runs" does too)
  const panel = await openPanel(page);
  await panel.locator('button.jp-DistTrainPanel-runs').click();
  const view = page.locator('.jp-DistTrainRuns');
  const rows = view.locator('tbody tr');
  const names = () => rows.locator('td[data-column="run"]').allInnerTexts();
  await view.locator('.jp-DistTrainRuns-filter').fill('uisweep');
  await expect(rows).toHaveCount(3);
  await expect(view.locator('thead th[data-column="hp:lr"]')).toBeVisible();
  await expect(view.locator('thead th[data-column="m:train/loss"]')).toBeVisible();

  // sort by a metric (the last loss: 0.3, 0.2, 0.4), then by the hparam, both ways
  const sortBy = (column: string) =>
    view.locator(`thead th[data-column="${column}"] button.jp-DistTrainRuns-sort`).click();
  await sortBy('m:train/loss');
  await expect(view.locator('thead th[data-column="m:train/loss"]')).toHaveAttribute(
    'aria-sort',
    'ascending'
  );
  expect(await names()).toEqual(['lr-0.01', 'lr-0.1', 'lr-0.001']);
  await sortBy('hp:lr');
  expect(await names()).toEqual(['lr-0.001', 'lr-0.01', 'lr-0.1']);
  await sortBy('hp:lr');
  expect(await names()).toEqual(['lr-0.1', 'lr-0.01', 'lr-0.001']);

  // the filter matches hparam values
  await view.locator('.jp-DistTrainRuns-filter').fill('uisweep lr=0.01');
  await expect(rows).toHaveCount(1);
  await view.locator('.jp-DistTrainRuns-filter').fill('uisweep');
  await expect(rows).toHaveCount(3);

  // select two runs: TensorBoard of all jobs shows exactly those
  const open = view.locator('button.jp-DistTrainRuns-tensorboard');
  await expect(open).toBeDisabled();
  for (const name of ['lr-0.1', 'lr-0.001']) {
    await view.locator(`tbody tr[data-run="${id}/${name}"] input[type="checkbox"]`).check();
  }
  await expect(view.locator('.jp-DistTrainRuns-status')).toContainText('2 selected');
  await page.screenshot({ path: path.join(SHOTS, 'runs.png') });
  await open.click();
  const frame = page.frameLocator('#jp-disttrain-tensorboard-_all iframe');
  const shown = [`${id}/tensorboard/lr-0.1`, `${id}/tensorboard/lr-0.001`];
  for (const name of shown) {
    await expect(frame.getByText(name, { exact: true }).first()).toBeVisible({ timeout: 120000 });
  }
  // its loss card, found through TensorBoard's tag filter: the all-jobs TensorBoard lists the
  // whole suite's tags by now, folds some tag groups and draws only the cards in view (its
  // group button is "Expand group" whether folded or not, so clicking it is no way to unfold)
  await frame.getByRole('combobox', { name: 'Filter tags (regex)' }).fill('^train/loss$');
  await frame.getByRole('combobox', { name: 'Filter tags (regex)' }).press('Escape');
  await expect(frame.locator('[title="train/loss"]').first()).toBeVisible({ timeout: 120000 });
  // the runs list holds the two and nothing else (not lr-0.01, not the plain writer's run)
  const runList = frame.locator('runs-selector tb-data-table-content-row, runs-selector tr');
  await expect
    .poll(async () => (await runList.allInnerTexts()).map(t => t.trim()).filter(Boolean))
    .toEqual(expect.arrayContaining(shown));
  const listed = (await runList.allInnerTexts()).map(t => t.trim()).filter(Boolean);
  expect(listed.filter(t => !shown.some(s => t.includes(s)))).toEqual([]);
  await expect(frame.getByText(`${id}/tensorboard/lr-0.01`, { exact: true })).toHaveCount(0);
  await expect(frame.getByText(`${id}/tensorboard/plain`, { exact: true })).toHaveCount(0);
  await page.screenshot({ path: path.join(SHOTS, 'runs-tensorboard.png') });

  // the palette's command opens (here: brings back) the view; the keys go to JupyterLab, not
  // to TensorBoard's frame, which has the focus since its tag filter was typed in
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  await page
    .locator('.lm-DockPanel-tabBar .lm-TabBar-tab', { hasText: 'Runs' })
    .locator('.lm-TabBar-tabCloseIcon')
    .click();
  await expect(view).toHaveCount(0);
  await page.keyboard.press('Control+Shift+C');
  await page.locator('.lm-CommandPalette-input').fill('Open Runs');
  await page.keyboard.press('Enter');
  await expect(view.locator('tbody tr').first()).toBeVisible();
});
