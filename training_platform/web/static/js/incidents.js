// Incidents as the charts and the anomalies panel show them: spans and episodes.
// Pure (no DOM): tested with node --test. The rules are the API's
// (history/incidents.py, docs/platform.md "Anomalies"); live `anomaly`
// messages carry no episode, so the dashboard groups every incident itself.

import { fmtStep } from "./format.js";

/** Incidents whose onsets follow each other within this many steps are one episode. */
export const EPISODE_STEPS = 10;

/**
 * The steps an incident covers on a chart whose data ends at `lastStep`: its
 * onset to the last step its condition held, or to the data's end while it
 * is ongoing.
 */
export function incidentSpan(anomaly, lastStep) {
  const start = anomaly.step;
  let end = Number.isFinite(anomaly.end_step) ? Math.max(start, anomaly.end_step) : start;
  if (anomaly.ongoing && Number.isFinite(lastStep)) end = Math.max(end, lastStep);
  return [start, end];
}

/** "step 401", "steps 401–1,499" or "step 401, ongoing": how long an incident lasted. */
export function spanText(anomaly) {
  const [start, end] = incidentSpan(anomaly, NaN);
  if (anomaly.ongoing) return `steps ${fmtStep(start)}–${fmtStep(end)}, ongoing`;
  return end > start ? `steps ${fmtStep(start)}–${fmtStep(end)}` : `step ${fmtStep(start)}`;
}

/**
 * Incidents (any order) grouped into episodes, in step order: each
 * `{ step, parts }` holds the incidents whose onsets chain within
 * `EPISODE_STEPS` of each other, `step` being the first onset.
 */
export function groupEpisodes(incidents) {
  const episodes = [];
  let previous = null;
  for (const incident of [...incidents].sort((a, b) => a.step - b.step)) {
    if (previous === null || incident.step - previous > EPISODE_STEPS) {
      episodes.push({ step: incident.step, parts: [] });
    }
    episodes[episodes.length - 1].parts.push(incident);
    previous = incident.step;
  }
  return episodes;
}
