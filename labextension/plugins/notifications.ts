/** The notifications plugin: says when a job succeeds, fails or is cancelled, with links to it. */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';

import { CommandIDs } from '../ids';
import { IJobsModel, JobsModel } from '../models/jobsmodel';
import { DistTrainSettings, IDistTrainSettings } from '../settings';

export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:notifications',
  description: 'Notifications when a job ends.',
  autoStart: true,
  requires: [IJobsModel, IDistTrainSettings],
  activate: (app: JupyterFrontEnd, model: JobsModel, settings: DistTrainSettings) => {
    const { commands } = app;
    model.finished.connect((_, { job }) => {
      if (!settings.values.notifications) {
        return;
      }
      const actions = [
        {
          label: 'Open logs',
          callback: () => void commands.execute(CommandIDs.logs, { id: job.id })
        },
        {
          label: 'Details',
          callback: () => void commands.execute(CommandIDs.details, { id: job.id })
        }
      ];
      const why = [job.reason, job.message].filter(Boolean).join(': ');
      if (job.phase === 'Succeeded') {
        Notification.success(`Job ${job.name} succeeded.`, { autoClose: 10000, actions });
      } else if (job.phase === 'Failed') {
        Notification.error(`Job ${job.name} failed${why ? `: ${why}` : ''}.`, {
          autoClose: false,
          actions
        });
      } else {
        Notification.info(`Job ${job.name} was cancelled.`, { autoClose: 5000, actions });
      }
    });
    // A running job its guard flagged (stalled, idle): once per episode, with its details.
    const said = new Set<string>();
    model.changed.connect(() => {
      for (const job of model.jobs) {
        const key = job.guard ? `${job.id}@${job.guard.since}` : '';
        if (!job.guard || said.has(key) || !settings.values.notifications) {
          continue;
        }
        said.add(key);
        const details = {
          label: 'Details',
          callback: () => void commands.execute(CommandIDs.details, { id: job.id })
        };
        Notification.warning(`Job ${job.name}: ${job.guard.message}.`, {
          autoClose: false,
          actions: [details]
        });
      }
    });
  }
};
