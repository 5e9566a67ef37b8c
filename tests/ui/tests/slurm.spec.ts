/**
 * A Slurm job in the sidebar: a real two-rank batch job on the run's own Slurm cluster
 * (run.sh starts one as root). It waits on a node another job holds, so its row shows Slurm's
 * pending reason; once that job is gone it runs, and the details list its replicas on the
 * Slurm node and the logs show each rank's lines.
 */
import { expect, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as path from 'path';

import { runCells } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true });
test.skip(!process.env.SLURM_CONF, 'no Slurm cluster: tests/ui/run.sh starts one when run as root');

// A job that holds node dt2 whole, so the notebook's job waits for it.
const BLOCKER = [
  'sbatch',
  '--parsable',
  '--job-name=uiblocker',
  '--nodelist=dt2',
  '--exclusive',
  '--output=/dev/null',
  '--wrap',
  'sleep 600'
];

const JOB = `%%distrun --backend slurm --gpus 2 --name uislurm --detach --sbatch-option=--nodelist=dt2
import os, time
print(f"hello from rank {os.environ['RANK']} on {os.environ['SLURMD_NODENAME']}", flush=True)
time.sleep(3)`;

test('a Slurm job shows its pending reason, then its replicas and logs', async ({
  page,
  tmpPath
}) => {
  execFileSync(BLOCKER[0], BLOCKER.slice(1));
  await runCells(page, tmpPath, 'slurm.ipynb', ['%load_ext jupyter_disttrain', JOB]);

  // --- pending, with Slurm's reason on its row
  const panel = await openPanel(page);
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uislurm' });
  const phase = row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)');
  await expect(phase).toHaveText('Pending');
  await expect(row.locator('.jp-DistTrainPanel-meta')).toContainText('slurm');
  await expect(row.locator('.jp-DistTrainPanel-reason')).toContainText('Resources: Slurm job');
  await expect(row.locator('.jp-DistTrainPanel-reason')).toContainText(
    'waiting for nodes, CPUs, GPUs or memory to free up'
  );
  await page.screenshot({ path: path.join(SHOTS, 'slurm-pending.png') });

  // --- the node frees up: it runs, on dt2, and ends
  execFileSync('scancel', ['--name=uiblocker']);
  await expect(phase).toHaveText('Succeeded', { timeout: 180000 });
  await row.locator('button[data-action="details"]').click();
  const details = page.locator('.jp-DistTrainDetails');
  const replicas = details.locator('.jp-DistTrainDetails-replicas tbody tr');
  await expect(replicas).toHaveCount(2);
  await expect(replicas.first()).toContainText('rank-0');
  await expect(replicas.first()).toContainText('dt2');
  await expect(details).toContainText('a new Slurm batch job, CPU processes (gloo)'); // its events
  await page.screenshot({ path: path.join(SHOTS, 'slurm-details.png') });

  await row.locator('button[data-action="logs"]').click();
  const log = page.locator('.jp-DistTrainLog');
  for (const rank of [0, 1]) {
    await expect(
      log.locator('.jp-DistTrainLog-row', {
        hasText: `[rank${rank}] hello from rank ${rank} on dt2`
      })
    ).toBeVisible();
  }
  await page.screenshot({ path: path.join(SHOTS, 'slurm-logs.png') });
});
