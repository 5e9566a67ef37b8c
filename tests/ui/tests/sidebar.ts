/** The jobs sidebar, for the browser tests. */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

/** The jobs sidebar, shown (a workspace restored by an earlier test may have it open already). */
export async function openPanel(page: IJupyterLabPageFixture) {
  const panel = page.locator('#jp-disttrain-sidebar');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
  }
  await expect(panel).toBeVisible();
  return panel;
}
