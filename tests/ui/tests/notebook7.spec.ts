/**
 * Notebook 7: the %%distrun cell view renders there too, and its buttons reach the
 * extension (logs open in the side panel: Notebook 7 pages hold one main widget).
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { notebook } from './notebook';

/** The part of the page's notebook panel read to know its kernel is ready. */
interface INotebookSession {
  sessionContext?: {
    session?: { kernel?: { connectionStatus: string; status: string } | null } | null;
  };
}

const CELLS = [
  '%load_ext jupyter_disttrain',
  `%%distrun --gpus 2 --name nbseven
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"notebook seven says hi from rank {dist.get_rank()}", flush=True)
dist.destroy_process_group()`
];

test('the cell view works in Notebook 7 and opens the logs', async ({
  context,
  baseURL,
  tmpPath,
  page
}) => {
  await page.contents.uploadContent(notebook(CELLS), 'text', `${tmpPath}/nb7.ipynb`);

  const nb7 = await context.newPage();
  await nb7.goto(`${baseURL}/notebooks/${tmpPath}/nb7.ipynb`);
  await expect(nb7.locator('.jp-NotebookPanel')).toBeVisible();
  // run once the notebook's kernel is connected and idle (earlier, Run All would be lost)
  await nb7.waitForFunction(() => {
    const panel = window.jupyterapp?.shell?.currentWidget as INotebookSession | null | undefined;
    const kernel = panel?.sessionContext?.session?.kernel;
    return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
  });
  // not awaited inside the page: the command resolves only when every cell has run
  await nb7.evaluate(() => {
    void window.jupyterapp.commands.execute('notebook:run-all-cells');
  });

  const view = nb7.locator('.jp-DistTrainCellView');
  await expect(view).toContainText(/nbseven-[a-z0-9]+\s*Succeeded/, { timeout: 120000 });
  await expect(view).toContainText('[rank1] notebook seven says hi from rank 1');

  await view.getByRole('button', { name: 'Open logs in the sidebar' }).click();
  const log = nb7.locator('.jp-DistTrainLog');
  await expect(log).toBeVisible();
  await expect(
    log.locator('.jp-DistTrainLog-row', { hasText: '[rank0] notebook seven says hi from rank 0' })
  ).toBeVisible();
  await expect(nb7.locator('#jp-disttrain-sidebar')).toBeVisible();
  await nb7.screenshot({
    path: path.join(process.env.SCREENSHOT_DIR ?? 'test-results', 'notebook7.png')
  });
  await nb7.close();
});
