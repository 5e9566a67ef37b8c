/**
 * The sidebar's "Warm pools" section with a real pool on the run's own Slurm cluster (run.sh
 * starts one as root): a kernel started inside an allocation (`salloc`, as a user starts one
 * there) runs a warm job, whose warm step the allocation's keeper holds after it: the section
 * lists the pool (where, its node and step, GPUs held, idle for, releases in), light and dark.
 * A second job runs in it; Release asks first, saying that job would fail; "Keep it" keeps it,
 * Release ends it: the job fails, the section empties and `GET pools` agrees. The kernel and its
 * allocation are ended after the test whatever its outcome.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { notebook } from './notebook';
import { openPanel } from './sidebar';

const SHOTS = process.env.SCREENSHOT_DIR ?? 'test-results';
const KERNEL = 'disttrain-salloc'; // a kernelspec of this test's own
const ALLOCATION = 'uipool-alloc'; // the allocation's job name

test.use({ autoGoto: true });
test.skip(!process.env.SLURM_CONF, 'no Slurm cluster: tests/ui/run.sh starts one when run as root');

// A kernel inside a one-node allocation, as a site's "Python (Slurm allocation)" kernel is.
function kernelDir(): string {
  return path.join(process.env.JUPYTER_DATA_DIR!, 'kernels', KERNEL);
}

function writeKernelspec(): void {
  const python = execFileSync('python', ['-c', 'import sys; print(sys.executable)']).toString();
  const argv = ['salloc', '--nodes=1', `--job-name=${ALLOCATION}`, python.trim()];
  fs.mkdirSync(kernelDir(), { recursive: true });
  fs.writeFileSync(
    path.join(kernelDir(), 'kernel.json'),
    JSON.stringify({
      argv: [...argv, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
      display_name: KERNEL,
      language: 'python'
    })
  );
}

const KEEP = '--backend slurm --gpus 2 --keep-warm 120s';
const CELLS = [
  '%load_ext jupyter_disttrain',
  `%%distrun ${KEEP} --name uipoolfirst\nprint("first", flush=True)`,
  `%%distrun ${KEEP} --name uipoolbusy --detach
import time
print("busy", flush=True)
while True:
    time.sleep(0.2)`
];

type Request = IJupyterLabPageFixture['request'];

async function listPools(request: Request) {
  const answer = await request.get('/disttrain/api/pools');
  expect(answer.status()).toBe(200);
  return answer.json();
}

async function jobNamed(request: Request, name: string): Promise<{ id: string }> {
  const jobs: { id: string; name: string }[] = (
    await (await request.get('/disttrain/api/jobs')).json()
  ).jobs;
  return jobs.find(j => j.name === name)!;
}

type Locator = ReturnType<IJupyterLabPageFixture['locator']>;

/** The sidebar from its top to a little below ``section`` (not its empty rest): a screenshot's. */
async function upTo(panel: Locator, section: Locator) {
  const [top, end] = [(await panel.boundingBox())!, (await section.boundingBox())!];
  return { x: top.x, y: top.y, width: top.width, height: end.y + end.height + 16 - top.y };
}

test.beforeEach(writeKernelspec);

// Whatever happened: the kernel shut down (its salloc then ends the allocation), the job that
// held the pool cancelled should it still run, the allocation cancelled should it still be there
// (its warm step and the keeper beside the kernel end with it).
test.afterEach(async ({ request }) => {
  try {
    const kernels: { id: string; name: string }[] = await (
      await request.get('/api/kernels')
    ).json();
    for (const kernel of kernels.filter(k => k.name === KERNEL)) {
      await request.delete(`/api/kernels/${kernel.id}`);
    }
    const busy = await jobNamed(request, 'uipoolbusy');
    if (busy) {
      await request.post(`/disttrain/api/jobs/${busy.id}/cancel`);
    }
  } finally {
    execFileSync('scancel', [`--name=${ALLOCATION}`]);
    fs.rmSync(kernelDir(), { recursive: true, force: true });
  }
});

test('a warm pool in the sidebar: listed, and released after a confirm', async ({
  page,
  request,
  tmpPath
}) => {
  await page.contents.uploadContent(notebook(CELLS, KERNEL), 'text', `${tmpPath}/pools.ipynb`);
  await page.notebook.openByPath(`${tmpPath}/pools.ipynb`);
  await page.notebook.activate('pools.ipynb');
  // the first job starts the warm step and waits for it; once it has ended, the pool is idle
  expect(await page.notebook.runCell(0)).toBe(true);
  expect(await page.notebook.runCell(1)).toBe(true);
  const {
    pools: [listed]
  } = await listPools(request);
  expect(listed.place).toMatch(/^allocation \d+$/);

  const panel = await openPanel(page);
  // this test's jobs only (a full run has more), so that the screenshots show the same list
  await panel.locator('.jp-DistTrainPanel-filter').fill('uipool');
  const section = panel.locator('.jp-DistTrainPools');
  const pool = section.locator('.jp-DistTrainPools-pool');
  await expect(section.locator('.jp-DistTrainPools-title')).toHaveText('Warm pools');
  await expect(pool).toHaveCount(1);
  await expect(pool).toHaveAttribute('data-pool-id', listed.id);
  const [node] = listed.nodes;
  await expect(pool.locator('.jp-DistTrainPools-place')).toHaveText(
    `slurm, ${listed.place}: no GPU held`
  );
  await expect(pool.locator('.jp-DistTrainPools-detail')).toHaveText(
    new RegExp(
      `^${node.host} \\(step ${node.step}\\) · idle \\d+s · releases itself in (1m \\d\\d|\\d+)s$`
    )
  );
  await page.screenshot({ path: path.join(SHOTS, 'pools.png'), clip: await upTo(panel, section) });

  // Dark: the section's texts in the theme's colours, not the light theme's
  await page.theme.setDarkTheme();
  const [place, detail, release, ...theme] = await pool.evaluate(row => {
    const swatch = row.ownerDocument.createElement('span');
    row.append(swatch);
    const colour = (css: string) => {
      swatch.style.color = css;
      return getComputedStyle(swatch).color;
    };
    const of = (selector: string) => getComputedStyle(row.querySelector(selector)!).color;
    const found = [
      of('.jp-DistTrainPools-place'),
      of('.jp-DistTrainPools-detail'),
      of('.jp-DistTrainPools-release'),
      colour('var(--jp-ui-font-color1)'),
      colour('var(--jp-ui-font-color2)'),
      colour('var(--jp-warn-color1)')
    ];
    swatch.remove();
    return found;
  });
  expect([place, detail, release]).toEqual(theme);
  expect(place).not.toBe('rgba(0, 0, 0, 0.87)'); // the light theme's
  const dark = await upTo(panel, section);
  await page.screenshot({ path: path.join(SHOTS, 'pools-dark.png'), clip: dark });
  await page.theme.setLightTheme();

  // A job in the pool: the section names it instead of the idle time
  await page.notebook.activate('pools.ipynb');
  expect(await page.notebook.runCell(2)).toBe(true);
  await expect.poll(async () => (await jobNamed(request, 'uipoolbusy'))?.id).toBeTruthy();
  const busy = (await jobNamed(request, 'uipoolbusy')).id;
  await openPanel(page);
  await expect(pool.locator('.jp-DistTrainPools-detail')).toHaveText(
    `${node.host} (step ${node.step}) · running ${busy} · kept while a job runs`
  );

  // Release asks first and says the job fails; "Keep it" keeps the pool
  const dialog = page.locator('.jp-Dialog');
  await pool.getByRole('button', { name: `Release warm pool ${listed.id}` }).click();
  await expect(dialog).toContainText('Release warm pool?');
  await expect(dialog).toContainText(`Job ${busy} runs in it and will fail.`);
  await dialog.getByRole('button', { name: 'Keep it' }).click();
  await expect(dialog).toBeHidden();
  await expect(pool).toHaveCount(1);
  expect((await listPools(request)).pools.map((p: { id: string }) => p.id)).toEqual([listed.id]);

  await pool.getByRole('button', { name: `Release warm pool ${listed.id}` }).click();
  await dialog.getByRole('button', { name: 'Release (the job fails)' }).click();
  await expect(
    page.locator('.Toastify__toast').filter({
      hasText: `Warm pool ${listed.id} released: its warm steps (${node.step} on ${node.host}) have ended`
    })
  ).toBeVisible();
  await expect(section).toBeHidden();
  await expect(pool).toHaveCount(0);
  expect(await listPools(request)).toEqual({ pools: [], errors: [] });
  const row = panel.locator('.jp-DistTrainPanel-job', { hasText: 'uipoolbusy' });
  await expect(row.locator('.jp-DistTrain-badge:not(.jp-DistTrain-quiet)')).toHaveText('Failed');
  await expect(row).toContainText(
    `the warm step ${node.step} on ${node.host} was released by force while the job ran`
  );
  await page.screenshot({ path: path.join(SHOTS, 'pools-released.png') });
});
