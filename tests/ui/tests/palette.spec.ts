/**
 * The jobs panel from the keyboard and the palette: a job picked by click or arrow keys is the
 * one the palette's "... of the Selected Job" commands act on (each enabled only where it
 * applies: TensorBoard only where the job wrote TensorBoard data); the filter box narrows the
 * list as you type; ended jobs older than a day are folded behind an "N older jobs" toggle.
 * Light and dark theme.
 */
import { expect, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as path from 'path';

import { submit, tensorboardPoint, waitForPhase } from './jobs';
import { openPanel } from './sidebar';

const JOB_ROOT = process.env.DISTTRAIN_JOB_ROOT!;
const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

// A job that ended three days ago, written by the store's own writers as a job of then would be.
const OLD_JOB = `
import sys
from datetime import datetime, timedelta, timezone
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.store import JobRecord, JobStore
store = JobStore(sys.argv[1])
then = (datetime.now(timezone.utc) - timedelta(days=3)).isoformat()
job_id = store.new_job_id("palold")
store.create(JobRecord(id=job_id, spec=JobSpec(name="palold"), created=then), "print(1)\\n")
store.write_status(JobStatus(job_id=job_id, phase=JobPhase.SUCCEEDED, created=then,
                             start_time=then, finish_time=then))
print(job_id)
`;

// 120 jobs that have just ended, by the same writers.
const MANY_JOBS = `
import sys
from jupyter_disttrain.model.specs import JobPhase, JobSpec, JobStatus
from jupyter_disttrain.storage.store import JobRecord, JobStore
store = JobStore(sys.argv[1])
for i in range(120):
    record = JobRecord(id=store.new_job_id("bulk"), spec=JobSpec(name="bulk"))
    store.create(record, "print(1)\\n")
    store.write_status(JobStatus(job_id=record.id, phase=JobPhase.SUCCEEDED, created=record.created))
`;

test('the palette acts on the selected job; the filter narrows the list; old jobs are folded', async ({
  page,
  request
}) => {
  const oldId = execFileSync('python', ['-c', OLD_JOB, JOB_ROOT]).toString().trim();
  const tbId = await submit(request, 'palone', tensorboardPoint('loss'));
  const plainId = await submit(request, 'paltwo', 'print("no tensorboard here")\n');
  await waitForPhase(request, tbId, 'Succeeded');
  await waitForPhase(request, plainId, 'Succeeded');

  const panel = await openPanel(page);
  const row = (id: string) => panel.locator(`.jp-DistTrainPanel-job[data-job-id="${id}"]`);
  await expect(row(tbId)).toBeVisible();
  await expect(row(plainId)).toBeVisible();

  // --- the old job is folded; the toggle shows it
  const toggle = panel.locator('.jp-DistTrainPanel-foldToggle');
  await expect(row(oldId)).toHaveCount(0);
  await expect(toggle).toHaveText(/^\d+ older jobs?$/);
  await expect(toggle).toHaveAttribute('aria-expanded', 'false');
  await toggle.click();
  await expect(row(oldId)).toBeVisible();
  await expect(toggle).toHaveAttribute('aria-expanded', 'true');
  await expect(toggle).toHaveText(/^Hide \d+ older jobs?$/);

  // --- the filter box narrows the list as you type (folded jobs included)
  const filter = panel.locator('.jp-DistTrainPanel-filter');
  const rows = panel.locator('.jp-DistTrainPanel-job');
  await filter.fill('paltwo');
  await expect(rows).toHaveCount(1);
  await expect(row(plainId)).toBeVisible();
  await filter.fill('palold succeeded');
  await expect(rows).toHaveCount(1);
  await expect(row(oldId)).toBeVisible();
  await filter.fill('no such job');
  await expect(rows).toHaveCount(0);
  await expect(panel.locator('.jp-DistTrainPanel-status')).toHaveText(
    'No job matches "no such job".'
  );
  await filter.fill('');
  await expect(row(tbId)).toBeVisible();

  // --- labelled actions: each says what it does and for which job; TensorBoard only where
  // the job wrote TensorBoard data
  const details = row(plainId).locator('button[data-action="details"]');
  await expect(details).toHaveAttribute('aria-label', 'Details (paltwo)');
  await expect(details).toHaveAttribute('title', 'Details (paltwo)');
  await expect(row(plainId).locator('button[data-action="tensorboard"]')).toHaveCount(0);
  await expect(row(tbId).locator('button[data-action="tensorboard"]')).toHaveCount(1);

  // --- a click selects a job; the arrow keys move the selection
  const enabled = (command: string) =>
    page.evaluate(c => window.jupyterapp.commands.isEnabled(c), command);
  await row(tbId).locator('.jp-DistTrainPanel-meta').click();
  await expect(row(tbId)).toHaveClass(/jp-mod-selected/);
  expect(await enabled('disttrain:selected-tensorboard')).toBe(true);
  expect(await enabled('disttrain:selected-cancel')).toBe(false); // it has ended
  await row(tbId).focus();
  const next = await rows.evaluateAll(
    (items, id) => items[items.findIndex(li => li.dataset.jobId === id) + 1]?.dataset.jobId,
    tbId
  );
  await page.keyboard.press('ArrowDown');
  await expect(row(next!)).toBeFocused();
  await expect(row(next!)).toHaveClass(/jp-mod-selected/);
  await expect(row(tbId)).not.toHaveClass(/jp-mod-selected/);
  await row(plainId).focus();
  await expect(row(plainId)).toHaveClass(/jp-mod-selected/);
  expect(await enabled('disttrain:selected-tensorboard')).toBe(false); // no TensorBoard data

  // --- the palette's command opens the selected job's details
  await page.keyboard.press('Control+Shift+C');
  await page.locator('.lm-CommandPalette-input').fill('Open Details of the Selected Job');
  await expect(page.locator('.lm-CommandPalette-item.lm-mod-active')).toContainText('(paltwo)');
  await page.keyboard.press('Enter');
  await expect(page.locator(`#jp-disttrain-details-${plainId}`)).toBeVisible();
  await expect(page.locator(`#jp-disttrain-details-${plainId}`)).toContainText(plainId);
  await page.screenshot({ path: path.join(SHOTS, 'palette.png') });

  // --- the dark theme: the filter box, the fold toggle and the selected row take its colours
  const looks = () =>
    page.evaluate(() => {
      const css = (selector: string) => {
        const style = getComputedStyle(document.querySelector(selector)!);
        return [style.color, style.backgroundColor];
      };
      return [
        css('.jp-DistTrainPanel-filter'),
        css('.jp-DistTrainPanel-foldToggle'),
        css('.jp-DistTrainPanel-job.jp-mod-selected')
      ];
    });
  const light = await looks();
  await page.theme.setDarkTheme();
  const dark = await looks();
  for (const [i, look] of dark.entries()) {
    expect(look).not.toEqual(light[i]);
    expect(look[1]).not.toBe('rgb(255, 255, 255)');
  }
  await page.keyboard.press('Control+Shift+C');
  await page.locator('.lm-CommandPalette-input').fill('of the Selected Job');
  await page.screenshot({ path: path.join(SHOTS, 'palette-dark.png') });
  await page.keyboard.press('Escape');
  await page.theme.setLightTheme();

  // --- "Resubmit" runs the selected job's own spec and script again as a new job, and opens it
  await page.keyboard.press('Control+Shift+C');
  await page.locator('.lm-CommandPalette-input').fill('Resubmit of the Selected Job');
  await expect(page.locator('.lm-CommandPalette-item.lm-mod-active')).toContainText('(paltwo)');
  await page.keyboard.press('Enter');
  const named = panel.locator('.jp-DistTrainPanel-job', { hasText: 'paltwo' });
  await expect(named).toHaveCount(2, { timeout: 60000 });
  const newId = await named.evaluateAll(
    (items, id) => items.map(li => li.dataset.jobId).find(j => j !== id),
    plainId
  );
  await expect(page.locator(`#jp-disttrain-details-${newId}`)).toBeVisible();
  await waitForPhase(request, newId!, 'Succeeded');

  // --- a long list draws its newest 100 rows; "Show more" draws the next ones
  execFileSync('python', ['-c', MANY_JOBS, JOB_ROOT]);
  const more = panel.locator('.jp-DistTrainPanel-more');
  await expect(more).toBeVisible({ timeout: 60000 });
  await expect(more).toHaveText(/^Show \d+ more \(\d+ not shown\)$/);
  await expect(
    panel.locator('.jp-DistTrainPanel-list:not(.jp-DistTrainPanel-folded) > li')
  ).toHaveCount(100);
  await more.click();
  await expect(more).toBeHidden();
  await expect(row(plainId)).toBeVisible(); // the oldest of the recent jobs, drawn again
});
