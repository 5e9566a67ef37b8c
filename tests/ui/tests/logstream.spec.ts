/**
 * The log viewer follows a running job through the server's event stream: once the stream is
 * open, new lines arrive with no offset polling.
 */
import { expect, test } from '@jupyterlab/galata';

import { notebook } from './notebook';

test.use({ autoGoto: true });

// Prints a line, then waits for the test to drop a `release` file in the notebook's folder
// (the job's working dir), so the second line is written while the viewer follows.
const WAITING = `%%distrun --gpus 1 --name uistream --detach
import os, time
print("before the release", flush=True)
while not os.path.exists("release"):
    time.sleep(0.2)
print("after the release", flush=True)`;

test('the log viewer follows a running job through the event stream', async ({ page, tmpPath }) => {
  await page.contents.uploadContent(
    notebook(['%load_ext jupyter_disttrain', WAITING]),
    'text',
    `${tmpPath}/stream.ipynb`
  );
  await page.notebook.openByPath(`${tmpPath}/stream.ipynb`);
  await page.notebook.activate('stream.ipynb');
  await page.notebook.run();

  const panel = page.locator('#jp-disttrain-sidebar');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
  }
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uistream' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Running');

  const streamed = page.waitForResponse(
    r => r.url().includes('/disttrain/api/jobs/') && r.url().includes('/logs/stream')
  );
  await row.locator('button[data-action="logs"]').click();
  const log = page.locator('.jp-DistTrainLog');
  await expect(
    log.locator('.jp-DistTrainLog-row', { hasText: 'before the release' })
  ).toBeVisible();
  const stream = await streamed;
  expect(stream.status()).toBe(200);
  expect(await stream.headerValue('content-type')).toContain('text/event-stream');

  // from here on, lines come through the stream: no offset reads
  const polls: string[] = [];
  page.on('request', r => {
    if (/\/disttrain\/api\/jobs\/[^/]+\/logs\?/.test(r.url())) {
      polls.push(r.url());
    }
  });
  await page.contents.uploadContent('go', 'text', `${tmpPath}/release`);
  await expect(log.locator('.jp-DistTrainLog-row', { hasText: 'after the release' })).toBeVisible();
  await expect(log.locator('.jp-DistTrainLog-status')).toContainText('ended');
  expect(polls).toEqual([]);
});
