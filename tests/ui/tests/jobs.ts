/** Jobs through the REST API, for the browser tests. */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

type Request = IJupyterLabPageFixture['request'];

/** Submits ``script`` as a CPU job named ``name``; its id. */
export async function submit(request: Request, name: string, script: string): Promise<string> {
  const answer = await request.post('/disttrain/api/jobs', {
    data: { script, spec: { name, accelerator: 'cpu' } }
  });
  expect(answer.status()).toBe(201);
  return (await answer.json()).id;
}

/** Waits (up to 2 minutes) until the job's phase is ``phase``. */
export async function waitForPhase(request: Request, id: string, phase: string) {
  await expect
    .poll(
      async () => (await (await request.get(`/disttrain/api/jobs/${id}`)).json()).status.phase,
      { timeout: 120000 }
    )
    .toBe(phase);
}

/** A job script that writes one TensorBoard point of ``tag`` (a run ``run``) and ends. */
export function tensorboardPoint(tag: string): string {
  return `
import os
from torch.utils.tensorboard import SummaryWriter
with SummaryWriter(os.path.join(os.environ["DISTTRAIN_TENSORBOARD_DIR"], "run")) as w:
    w.add_scalar("${tag}", 1.0, 0)
`;
}

/** Submits ``script`` as ``name`` and waits until it has succeeded; its id. */
export async function finishedJob(request: Request, name: string, script: string): Promise<string> {
  const id = await submit(request, name, script);
  await waitForPhase(request, id, 'Succeeded');
  return id;
}
