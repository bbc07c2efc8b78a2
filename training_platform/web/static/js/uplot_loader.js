// uPlot is loaded, not imported: a missing or broken copy (404, bad file) must not
// take a page down with it. Without it the charts show their latest values in
// their legends and no plot, and main.js says what is missing and how to fix it.
// Every chart module (charts.js, compare_chart.js, system_chart.js) takes it here.

let loaded = null;
let failure = null;
try {
  loaded = (await import("/static/vendor/uplot/uPlot.esm.js")).default;
  if (typeof loaded !== "function") throw new Error("uPlot.esm.js has no uPlot export");
} catch (error) {
  loaded = null;
  failure = error;
}

/** The uPlot constructor, or null when the library could not be loaded. */
export const uPlot = loaded;
/** Why it could not (null when it was). */
export const chartLibraryError = failure;
