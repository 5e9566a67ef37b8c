/** The jobs-model plugin: the one polled job list of the page, shared through `IJobsModel`. */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';

import { listJobs } from '../rest/client';
import { IJobsModel, JobsModel } from '../models/jobsmodel';
import { DistTrainSettings, IDistTrainSettings } from '../settings';

export const jobsPlugin: JupyterFrontEndPlugin<JobsModel> = {
  id: 'jupyter_disttrain:jobs',
  description: 'Polls the job list of the Jupyter server for the other plugins.',
  autoStart: true,
  provides: IJobsModel,
  requires: [IDistTrainSettings],
  activate: (_app: JupyterFrontEnd, settings: DistTrainSettings) => {
    const model = new JobsModel({
      fetchJobs: listJobs,
      interval: settings.values.refreshInterval
    });
    settings.changed.connect(() => model.setInterval(settings.values.refreshInterval));
    void model.start();
    return model;
  }
};
