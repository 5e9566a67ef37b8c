/** A job's panel (its details, in tabs), for the browser tests. */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

/** The panel of job `jobId`. */
export function jobPanel(page: Pick<IJupyterLabPageFixture, 'locator'>, jobId: string) {
  return page.locator(`#jp-disttrain-details-${jobId}`);
}

/** Brings tab `tab` (overview, logs, resources, runs, events, spec) of the job's panel to front. */
export async function showTab(
  page: Pick<IJupyterLabPageFixture, 'locator'>,
  jobId: string,
  tab: string
) {
  const li = jobPanel(page, jobId).locator(`.jp-DistTrainDetails-tabBar li[data-tab="${tab}"]`);
  await li.click();
  await expect(li).toHaveClass(/lm-mod-current/);
}
