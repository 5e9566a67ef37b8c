/** The jobs sidebar, for the browser tests. */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

/**
 * The jobs sidebar, shown. A workspace restored by an earlier test may have it open already,
 * and on a page that is not Galata's the restore may still be under way: a click then opens
 * it, or toggles closed what the restore has just opened. So look, click if hidden, and look
 * again until it stays shown.
 */
export async function openPanel(page: Pick<IJupyterLabPageFixture, 'locator'>) {
  const panel = page.locator('#jp-disttrain-sidebar');
  await expect(async () => {
    if (!(await panel.isVisible())) {
      await page.locator('.jp-SideBar.jp-mod-left li[data-id="jp-disttrain-sidebar"]').click();
    }
    await expect(panel).toBeVisible({ timeout: 2000 });
  }).toPass({ timeout: 60000 });
  return panel;
}
