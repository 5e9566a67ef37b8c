/**
 * Checkpoints in the UI (issue 26), with real jobs: 2 CPU ranks (gloo) that `torch.save` into
 * $DISTTRAIN_CHECKPOINT_DIR every 3 steps while `em` logs the loss of every step. The job
 * details list the checkpoints with their steps; Download saves one; Load in notebook inserts a cell that loads
 * one; Resume from here starts a new job that gets DISTTRAIN_RESUME_FROM = that checkpoint and
 * Succeeds; and its run shows as one line across both jobs with the resume step marked.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import { showTab } from './details';
import { waitForPhase } from './jobs';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';
const JOB_ROOT = process.env.DISTTRAIN_JOB_ROOT!;

test.use({ autoGoto: true });

// Steps 0..9, a checkpoint at steps 2, 5 and 8 (rank 0 saves, every rank waits at a barrier);
// a resumed job loads its checkpoint and goes on from the step after it.
const TRAIN = `
import os
import torch
import torch.distributed as dist
from torch import nn
from jupyter_disttrain import em


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)


dist.init_process_group("gloo")
rank = dist.get_rank()
model = Net()
start = 0
resume = em.resume_from()
if resume:
    state = torch.load(resume, weights_only=False)
    model.load_state_dict(state["model"])
    start = state["step"] + 1
    print(f"DISTTRAIN_RESUME_FROM={resume}", flush=True)
run = em.create_run("train", total_steps=9)
for step in range(start, 10):
    run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
    if rank == 0 and step % 3 == 2:
        name = os.path.join(em.checkpoint_dir(), f"step_{step}.pt")  # $DISTTRAIN_CHECKPOINT_DIR
        torch.save({"model": model.state_dict(), "step": step}, name)
    dist.barrier()
run.finish()
dist.destroy_process_group()
`;

test('the Checkpoints section lists a job’s checkpoints; load one, resume from one', async ({
  page,
  request
}) => {
  test.setTimeout(420 * 1000); // two real 2-rank jobs on a loaded machine
  const answer = await request.post('/disttrain/api/jobs', {
    data: { script: TRAIN, spec: { name: 'uickpt', accelerator: 'cpu', nproc_per_node: 2 } }
  });
  expect(answer.status()).toBe(201);
  const first = (await answer.json()).id as string;
  await waitForPhase(request, first, 'Succeeded');

  const panel = await openPanel(page);
  await panel
    .locator(`.jp-DistTrainPanel-job[data-job-id="${first}"] button[data-action="details"]`)
    .click();
  const details = page.locator(`#jp-disttrain-details-${first}`);
  await showTab(page, first, 'checkpoints');
  const section = details.locator('.jp-DistTrainCheckpoints');
  const rows = section.locator('tbody tr');
  // every checkpoint with its step, complete (the last one once its 2 s of quiet have passed)
  await expect(rows.locator('td[data-column="Step"]')).toHaveText(['2', '5', '8']);
  await expect(rows.locator('td[data-column="State"]')).toHaveText([
    'complete',
    'complete',
    'complete'
  ]);
  await expect(rows.locator('td[data-column="Kind"]')).toHaveText(['torch', 'torch', 'torch']);
  // the run's loss at that step
  await expect(rows.nth(1).locator('td[data-column="Metrics"]')).toHaveText('train/loss=0.1667');
  await expect(section.locator('.jp-DistTrainCheckpoints-usage')).toContainText(
    '3 checkpoints use'
  );
  const step5 = rows.filter({ has: page.locator('td[data-column="Step"]', { hasText: '5' }) });
  const checkpointPath = path.join(JOB_ROOT, first, 'checkpoints', 'step_5.pt');

  // Download: the checkpoint's file, byte for byte
  const download = page.waitForEvent('download');
  await step5.getByRole('button', { name: 'Download' }).click();
  const saved = await (await download).path();
  expect(fs.readFileSync(saved).equals(fs.readFileSync(checkpointPath))).toBe(true);

  // Load in notebook without a notebook: a notification says so
  await step5.getByRole('button', { name: 'Load in notebook' }).click();
  await expect(
    page.locator('.Toastify__toast').filter({ hasText: 'No notebook is open' })
  ).toBeVisible();

  // with one: a cell below the active one whose code loads that checkpoint with the model class
  await page.notebook.createNew('ckpt.ipynb');
  await page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab', { hasText: 'uickpt' }).click();
  await expect(section).toBeVisible();
  await step5.getByRole('button', { name: 'Load in notebook' }).click();
  const cells = page.locator('.jp-NotebookPanel .jp-Notebook .jp-Cell');
  await expect(cells).toHaveCount(2);
  const code = cells.nth(1).locator('.cm-content');
  await expect(code).toContainText(checkpointPath);
  await expect(code).toContainText('model = Net()');

  // light and dark screenshots of the section, once the notice above has closed itself
  await expect(
    page.locator('.Toastify__toast').filter({ hasText: 'No notebook is open' })
  ).toBeHidden({ timeout: 30000 });
  await page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab', { hasText: 'uickpt' }).click();
  await section.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'checkpoints.png') });
  await page.theme.setDarkTheme();
  await section.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'checkpoints-dark.png') });
  await page.theme.setLightTheme();

  const others = async () => {
    const jobs: { id: string; name: string }[] = (
      await (await request.get('/disttrain/api/jobs')).json()
    ).jobs;
    return jobs.filter(j => j.name === 'uickpt' && j.id !== first).map(j => j.id);
  };
  // a checkpoint gone since it was listed: the server's one-line reason, nothing launched, and
  // the list read again. The button is the one drawn before the file went (the list's next
  // poll may redraw it without that row between the removal and a click that looks it up anew)
  await expect(rows.first().locator('td[data-column="Step"]')).toHaveText('2');
  const listed = await rows
    .first()
    .getByRole('button', { name: 'Resume from here' })
    .elementHandle();
  fs.rmSync(path.join(JOB_ROOT, first, 'checkpoints', 'step_2.pt'));
  await listed!.evaluate(button => (button as HTMLElement).click());
  await expect(
    page.locator('.Toastify__toast').filter({
      hasText: `Cannot resume from step 2: checkpoint: job ${first} has no checkpoint`
    })
  ).toContainText('its steps are 5, 8');
  await expect(rows.locator('td[data-column="Step"]')).toHaveText(['5', '8']);
  expect(await others()).toEqual([]);

  // Resume from here: a new job from step 5, whose details open; the checkpoint is now pinned
  await step5.getByRole('button', { name: 'Resume from here' }).click();
  await expect.poll(others).toHaveLength(1);
  const [second] = await others();
  await expect(step5.locator('td[data-column="Pinned"]')).toHaveText('pinned');
  const next = page.locator(`#jp-disttrain-details-${second}`);
  await expect(next).toBeVisible();
  await showTab(page, second, 'checkpoints');
  await waitForPhase(request, second, 'Succeeded');
  // its ranks got the checkpoint's path
  await expect
    .poll(async () => {
      const logs = await (await request.get(`/disttrain/api/jobs/${second}/logs`)).json();
      return logs.lines.map((l: { text: string }) => l.text).join('\n');
    })
    .toContain(`DISTTRAIN_RESUME_FROM=${checkpointPath}`);
  // it says where it resumed from, a link to that job
  const from = next.locator('.jp-DistTrainCheckpoints-resumedFrom button');
  await expect(from).toHaveText(`resumed from ${first}:5`);
  await expect(next.locator('.jp-DistTrainCheckpoints tbody td[data-column="Step"]')).toHaveText([
    '8'
  ]);

  // its run: one line, steps 0..5 of the first job and 6..9 of its own, the resume marked at 5
  await showTab(page, second, 'runs');
  const run = next.locator('.jp-DistTrainRun[data-run="train"]');
  await expect(run.locator('.jp-DistTrainRun-resumed')).toHaveText('resumed at step 5');
  const loss = run.locator('.jp-DistTrainChart[data-metric="train/loss"]');
  await expect(loss.locator('svg')).toHaveAttribute(
    'aria-label',
    'train/loss: 10 points, last 0.1'
  );
  expect(
    (await loss.locator('.jp-DistTrainChart-line').getAttribute('d'))!.match(/M/g)
  ).toHaveLength(1);
  await expect(loss.locator('.jp-DistTrainChart-resume')).toHaveAttribute('data-step', '5');
  await expect(loss.locator('.jp-DistTrainChart-range')).toContainText('steps 0–9');
  // in one step in the page: the section may be drawn again between finding it and scrolling
  await run.evaluate(el => el.scrollIntoView({ block: 'center' }));
  await page.screenshot({ path: path.join(SHOTS, 'checkpoints-resumed-run.png') });

  // the link opens the job it resumed from
  await showTab(page, second, 'checkpoints');
  await from.click();
  await expect(details).toBeVisible();
});
