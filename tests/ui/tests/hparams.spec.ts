/**
 * The HParams dashboard of the embedded TensorBoard, in a browser logged in the way a person is
 * (a cookie, no token header): TensorBoard's hparams plugin asks for its data with POSTs that
 * carry no Jupyter XSRF token; the proxy lets them through because the browser says they come
 * from this origin, and the dashboard shows the run's hyper-parameters.
 */
import { expect, test } from '@jupyterlab/galata';

import { submit, waitForPhase } from './jobs';
import { openPanel } from './sidebar';

const TOKEN = process.env.JLAB_TOKEN!;

const TRAIN = `
from jupyter_disttrain import em
run = em.create_run("hp", hparams={"lr": 0.25, "batch_size": 48})
for step in range(3):
    run.log("train", {"loss": 1.0 / (step + 1)}, step=step)
run.finish()
`;

test('the HParams dashboard shows the run through the proxy', async ({
  browser,
  baseURL,
  request
}) => {
  const jobId = await submit(request, 'hparams', TRAIN);
  await waitForPhase(request, jobId, 'Succeeded');

  const context = await browser.newContext({
    baseURL,
    viewport: { width: 1400, height: 850 },
    extraHTTPHeaders: {}
  });
  const page = await context.newPage();
  const answers: string[] = [];
  page.on('response', response => {
    const url = response.url();
    if (url.includes('/disttrain/tensorboard/') && url.includes('/data/plugin/hparams/')) {
      answers.push(`${response.request().method()} ${response.status()}`);
    }
  });
  // A workspace of its own: the tab it opens is not restored into the other specs' pages.
  await page.goto(`/lab/workspaces/hparams?reset&token=${TOKEN}`);
  await expect(page.locator('#jupyterlab-splash')).toHaveCount(0, { timeout: 120000 });

  const panel = await openPanel(page);
  const row = panel.locator(`.jp-DistTrainPanel-job[data-job-id="${jobId}"]`);
  await row.locator('button[data-action="tensorboard"]').click();
  const frame = page.frameLocator('.jp-DistTrainTensorBoard iframe');
  await frame
    .getByText(/^\s*hparams\s*$/i)
    .first()
    .click({ timeout: 120000 });

  // The table of sessions: the run's hyper-parameters and their values.
  await expect(frame.getByText('batch_size').first()).toBeVisible({ timeout: 60000 });
  await expect(frame.getByText('0.25').first()).toBeVisible();
  await expect(frame.getByText('No hparams data was found')).toHaveCount(0);
  expect(answers.filter(a => a.startsWith('POST')).length).toBeGreaterThan(0);
  expect(answers.filter(a => !a.endsWith(' 200'))).toEqual([]);
  await context.close();
});
