/**
 * A job's details as tabs, one panel per job: Overview (phase, replicas, key metrics), Logs
 * (the log viewer, in the same panel), Resources, Runs, Events, Spec and script, each showing
 * its content; opening the job's logs from the sidebar brings the same panel to front on Logs,
 * and its details again on Overview: never a second panel. Light and dark.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { jobPanel, showTab } from './details';
import { finishedJob } from './jobs';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';

test.use({ autoGoto: true, viewport: { width: 1440, height: 900 } });

const JOB = `
from jupyter_disttrain import em
run = em.create_run("tabs", hparams={"lr": 0.1}, total_steps=4)
for step in range(5):
    run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
    print(f"step {step} logged", flush=True)
run.finish()
print("all done", flush=True)
`;

test('the job details are tabs of one panel per job, the logs one of them', async ({
  page,
  request
}) => {
  test.setTimeout(300 * 1000);
  const id = await finishedJob(request, 'uitabs', JOB);
  const panel = await openPanel(page);
  const row = panel.locator(`.jp-DistTrainPanel-job[data-job-id="${id}"]`);
  await row.locator('button[data-action="details"]').click();

  const job = jobPanel(page, id);
  const tabs = job.locator('.jp-DistTrainDetails-tabBar li');
  await expect(tabs).toHaveText([
    'Overview',
    'Logs',
    'Resources',
    'Runs',
    'Events',
    'Spec and script'
  ]);
  const current = job.locator('.jp-DistTrainDetails-tabBar li.lm-mod-current');
  await expect(current).toHaveAttribute('data-tab', 'overview');
  const tab = (name: string) => job.locator(`.jp-DistTrainDetails-tab.jp-mod-${name}`);

  // Overview: name, phase, the replicas, each run's step and last metrics
  const overview = tab('overview');
  await expect(overview.locator('h2')).toHaveText('uitabs');
  await expect(overview.locator('.jp-DistTrain-badge').first()).toHaveText('Succeeded');
  await expect(overview.locator('.jp-DistTrainDetails-replicas tbody tr')).toHaveCount(1);
  const metrics = overview.locator('.jp-DistTrainDetails-keyMetrics');
  const runProgress = metrics.locator('td[data-column="Progress"]');
  await expect(runProgress.locator('[role="progressbar"]')).toHaveAttribute('aria-valuenow', '4');
  await expect(runProgress).toContainText('4 / 4');
  await expect(metrics.locator('td[data-column="train/loss"]')).toHaveText('0.2');
  await page.screenshot({ path: path.join(SHOTS, 'details-tabs.png') });

  // every other tab shows its own content, and only it
  await showTab(page, id, 'logs');
  await expect(overview).toBeHidden();
  await expect(tab('logs').locator('.jp-DistTrainLog-row', { hasText: 'all done' })).toBeVisible();
  await showTab(page, id, 'resources');
  await expect(tab('resources').locator('.jp-DistTrainDetails-info')).toBeVisible();
  await expect(tab('resources')).not.toContainText('Loading');
  await showTab(page, id, 'runs');
  await expect(tab('runs').locator('.jp-DistTrainRun[data-run="tabs"]')).toBeVisible();
  await expect(
    tab('runs').locator('.jp-DistTrainChart[data-metric="train/loss"] svg')
  ).toBeVisible();
  await showTab(page, id, 'events');
  await expect(tab('events').locator('.jp-DistTrainDetails-info')).toBeVisible();
  await expect(tab('events')).not.toContainText('Loading');
  await showTab(page, id, 'spec');
  await expect(tab('spec').locator('.jp-DistTrainDetails-spec')).toContainText('torchrun');
  await expect(tab('spec').locator('.jp-DistTrainDetails-script .cm-content')).toBeVisible();
  await showTab(page, id, 'overview');

  // the sidebar's Logs: the same panel, now on Logs; Details again: on Overview
  const dockTabs = page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab');
  await row.locator('button[data-action="logs"]').click();
  await expect(current).toHaveAttribute('data-tab', 'logs');
  await expect(tab('logs').locator('.jp-DistTrainLog-row').first()).toBeVisible();
  await expect(dockTabs.filter({ hasText: 'uitabs' })).toHaveCount(1);
  await expect(page.locator('.jp-DistTrainDetails')).toHaveCount(1);
  await expect(page.locator('.jp-DistTrainLog')).toHaveCount(1);
  await row.locator('button[data-action="details"]').click();
  await expect(current).toHaveAttribute('data-tab', 'overview');
  await expect(dockTabs.filter({ hasText: 'uitabs' })).toHaveCount(1);

  // the dark theme: the tab bar and the current tab's underline take the theme's colours
  const bar = job.locator('.jp-DistTrainDetails-tabBar');
  const looks = async () => ({
    bar: await bar.evaluate(el => getComputedStyle(el).backgroundColor),
    underline: await current.evaluate(el => getComputedStyle(el).borderBottomColor)
  });
  const light = await looks();
  await page.theme.setDarkTheme();
  const dark = await looks();
  expect(dark.bar).not.toBe(light.bar);
  expect(dark.underline).not.toBe(light.underline);
  await row.locator('button[data-action="logs"]').click();
  await expect(current).toHaveAttribute('data-tab', 'logs');
  await page.screenshot({ path: path.join(SHOTS, 'details-tabs-dark.png') });
  await page.theme.setLightTheme();
});
