"""The run page's Samples panel in headless Chromium: step slider, the table, full texts
shown literally, filters, following live, chart clicks, anomaly links, a run without samples.

SQLite only, like test_dashboard.py. Every test also fails on any browser console
error (conftest.py) and leaves a screenshot in test-artifacts/web/.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

JOB = "rollouts"
SAMPLE_STEPS = (0, 10, 20)
HOSTILE = "<script>window.__pwned=1</script><b>x</b>\n  indented line\n\nlast line"
PROMPTS = {"p-0": "What is 17 * 23?", "p-1": "Name a prime\nbetween 10 and 20."}


def _samples_of(step: int) -> list[dict[str, Any]]:
    """Four samples a step, two groups of two; step 10's last reward is NaN."""
    rows = []
    for index in range(4):
        group = f"p-{index // 2}"
        right = index % 2 == 0
        completion = f"step {step} answer {index}: " + ("391" if right else "I think 400")
        if step == 20 and index == 2:
            completion = HOSTILE
        rows.append(
            build_sample(
                step,
                index,
                PROMPTS[group],
                completion,
                reward=float("nan") if (step == 10 and index == 3) else (1.0 if right else 0.25),
                rewards={"accuracy": 1.0 if right else 0.0, "format": 1.0 if index < 3 else 0.5},
                group=group,
                response_length=10 + index * 100 + step,
                finish_reason="length" if index == 3 else "stop",
                extra={"ground_truth": "391"} if index == 0 else None,
            )
        )
    return rows


def _write_samples(server: LiveServer, job_id: str, samples: list[dict[str, Any]]) -> None:
    """Append complete lines to `{job_id}_samples.jsonl`, as log_samples does."""
    with (server.metrics_dir / f"{job_id}_samples.jsonl").open("ab") as handle:
        for sample in samples:
            handle.write(encode_record(sample))


def _store_run(server: LiveServer, job_id: str = JOB, *, samples: bool = True) -> None:
    server.write_records(job_id, [make_record(step) for step in range(30)])
    if samples:
        _write_samples(server, job_id, [s for step in SAMPLE_STEPS for s in _samples_of(step)])
    server.write_status(job_id, "running", 29, 100)
    server.sync(job_id)


def _open(page: Any, server: LiveServer, job_id: str = JOB) -> None:
    page.goto(f"{server.url}/#/run/{job_id}")
    page.wait_for_function(
        """() => document.querySelector('.chart[data-chart="losses"] .legend-step')
            ?.textContent === 'step 29'"""
    )


def _wait_step(page: Any, step: int) -> None:
    """Until the panel shows `step` and its rows are those of that step."""
    page.wait_for_function(
        """(step) => {
            const label = document.querySelector('.samples-step');
            const rows = [...document.querySelectorAll('table.samples tr.sample-row')];
            return label?.textContent === `step ${step}` && rows.length > 0
              && rows.every((row) => row.dataset.step === String(step));
        }""",
        arg=step,
    )


def _rows(page: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('table.samples tr.sample-row')].map((row) => {
            const cell = (name) => row.querySelector(`td.${name}`);
            return {
              step: Number(row.dataset.step), index: cell('index').textContent,
              group: cell('group').textContent, reward: cell('reward').textContent,
              reward_red: cell('reward').classList.contains('nonfinite')
                && getComputedStyle(cell('reward')).color === 'rgb(220, 38, 38)',
              components: cell('components').textContent, length: cell('length').textContent,
              finish: cell('finish').textContent,
              truncated: Boolean(cell('finish').querySelector('.finish-length')),
              preview: cell('preview').textContent,
            };
        })"""
    )
    return result


def _indices(page: Any) -> list[str]:
    return [row["index"] for row in _rows(page)]


def _wait_indices(page: Any, indices: list[str]) -> None:
    page.wait_for_function(
        """(want) => JSON.stringify([...document.querySelectorAll(
            'table.samples tr.sample-row td.index')].map((td) => td.textContent))
            === JSON.stringify(want)""",
        arg=indices,
    )


def test_the_slider_walks_the_steps_and_the_table_shows_each_steps_rows(
    live_server: LiveServer, page: Any
) -> None:
    _store_run(live_server)
    _open(page, live_server)

    _wait_step(page, 20)  # the newest step with samples first
    assert page.inner_text(".samples-count") == "3 steps"
    # mean of 1, 0.25, 1, 0.25; index 3 finished by length.
    assert page.inner_text(".samples-step-stats") == "4 samples · mean reward 0.625 · 1 truncated"
    assert page.locator(".samples-follow").is_checked()
    assert page.locator(".samples-next").is_disabled()

    page.click(".samples-prev")
    _wait_step(page, 10)
    assert not page.locator(".samples-follow").is_checked()  # moved off the newest
    rows = _rows(page)
    assert rows == [
        {
            "step": 10,
            "index": "0",
            "group": "p-0",
            "reward": "1",
            "reward_red": False,
            "components": "accuracy 1format 1",
            "length": "20",
            "finish": "stop",
            "truncated": False,
            "preview": "step 10 answer 0: 391",
        },
        {
            "step": 10,
            "index": "1",
            "group": "p-0",
            "reward": "0.25",
            "reward_red": False,
            "components": "accuracy 0format 1",
            "length": "120",
            "finish": "stop",
            "truncated": False,
            "preview": "step 10 answer 1: I think 400",
        },
        {
            "step": 10,
            "index": "2",
            "group": "p-1",
            "reward": "1",
            "reward_red": False,
            "components": "accuracy 1format 1",
            "length": "220",
            "finish": "stop",
            "truncated": False,
            "preview": "step 10 answer 2: 391",
        },
        {
            "step": 10,
            "index": "3",
            "group": "p-1",
            "reward": "NaN",
            "reward_red": True,
            "components": "accuracy 0format 0.5",
            "length": "320",
            "finish": "length",
            "truncated": True,
            "preview": "step 10 answer 3: I think 400",
        },
    ]
    # The NaN reward is left out of the step's mean (finite rewards only).
    assert page.inner_text(".samples-step-stats") == "4 samples · mean reward 0.75 · 1 truncated"

    # The slider itself: keyboard to the first step, then one to the right.
    page.focus(".samples-slider")
    page.keyboard.press("Home")
    _wait_step(page, 0)
    assert page.locator(".samples-prev").is_disabled()
    assert _rows(page)[1]["length"] == "110"
    page.keyboard.press("ArrowRight")
    _wait_step(page, 10)


def test_a_row_opens_the_full_texts_as_text_never_as_html(
    live_server: LiveServer, page: Any
) -> None:
    _store_run(live_server)
    _open(page, live_server)
    _wait_step(page, 20)

    row = page.locator('tr.sample-row[data-index="2"]')
    assert row.locator("td.preview").inner_text() == (
        "<script>window.__pwned=1</script><b>x</b> indented line last line"
    )
    row.click()
    detail = page.locator('tr.sample-detail[data-index="2"]')
    completion = detail.locator(".sample-completion")
    completion.wait_for()
    assert completion.evaluate("el => el.textContent") == HOSTILE  # whitespace and all
    assert completion.evaluate("el => el.children.length") == 0  # no <b>, no <script>
    assert completion.evaluate("el => getComputedStyle(el).whiteSpace") == "pre-wrap"
    assert detail.locator(".sample-prompt").evaluate("el => el.textContent") == PROMPTS["p-1"]
    assert page.evaluate("() => typeof window.__pwned") == "undefined"
    assert page.locator("table.samples b").count() == 0
    assert page.locator("#samples-panel script").count() == 0
    assert row.get_attribute("aria-expanded") == "true"

    # The same prompt in every step of the run, one column per step.
    detail.locator(".samples-same-prompt").click()
    page.wait_for_selector(".prompt-strip .prompt-step")
    columns = page.eval_on_selector_all(
        ".prompt-strip .prompt-step",
        """cols => cols.map((col) => ({
            step: col.dataset.step,
            cards: [...col.querySelectorAll('.prompt-card')].map((c) => c.dataset.index),
            current: col.classList.contains('current'),
        }))""",
    )
    assert columns == [
        {"step": "0", "cards": ["2", "3"], "current": False},
        {"step": "10", "cards": ["2", "3"], "current": False},
        {"step": "20", "cards": ["2", "3"], "current": True},
    ]
    hostile_card = page.locator('.prompt-step[data-step="20"] .prompt-card[data-index="2"]')
    assert "current" in (hostile_card.get_attribute("class") or "")
    assert hostile_card.locator(".prompt-card-text").evaluate("el => el.textContent") == HOSTILE
    assert page.evaluate("() => typeof window.__pwned") == "undefined"

    # A step's header in the strip moves the table there.
    page.click('.prompt-step[data-step="0"] .prompt-step-head button')
    _wait_step(page, 0)

    # Clicking the row again closes it.
    page.locator('tr.sample-row[data-index="1"]').click()
    page.wait_for_selector('tr.sample-detail[data-index="1"]')
    page.locator('tr.sample-row[data-index="1"]').click()
    page.wait_for_selector('tr.sample-detail[data-index="1"]', state="detached")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator('tr.sample-row[data-index="2"]').click()
    page.locator('tr.sample-detail[data-index="2"] .samples-same-prompt').click()
    page.wait_for_selector('tr.sample-detail[data-index="2"] .prompt-strip .prompt-step')
    page.locator("#samples-panel").screenshot(path=str(ARTIFACTS / "samples_panel_expanded.png"))


def test_filters_search_and_sort_change_the_rows(live_server: LiveServer, page: Any) -> None:
    _store_run(live_server)
    _open(page, live_server)
    _wait_step(page, 20)
    page.click(".samples-prev")
    _wait_step(page, 10)
    _wait_indices(page, ["0", "1", "2", "3"])

    page.fill(".samples-search", "think 400")  # debounced
    _wait_indices(page, ["1", "3"])
    page.fill(".samples-search", "")
    _wait_indices(page, ["0", "1", "2", "3"])

    page.select_option(".samples-finish", "length")
    _wait_indices(page, ["3"])
    assert _rows(page)[0]["truncated"]
    page.select_option(".samples-finish", "")
    _wait_indices(page, ["0", "1", "2", "3"])

    # By reward, highest first; the NaN reward comes last in either order.
    page.select_option(".samples-sort", "reward")
    page.select_option(".samples-order", "desc")
    _wait_indices(page, ["2", "0", "1", "3"])
    page.select_option(".samples-order", "asc")
    _wait_indices(page, ["1", "0", "2", "3"])

    page.fill(".samples-group", "p-1")
    _wait_indices(page, ["2", "3"])
    page.fill(".samples-min", "0.5")
    _wait_indices(page, ["2"])
    page.fill(".samples-group", "nobody")
    page.wait_for_function(
        """() => document.querySelector('.samples-rows-note').textContent
            === 'No samples at step 10 match these filters.'"""
    )
    page.click(".samples-clear")
    _wait_indices(page, ["0", "1", "2", "3"])

    # The whole run: every step's samples, with a step column.
    page.select_option(".samples-scope", "run")
    page.fill(".samples-search", "answer 0")
    page.wait_for_function(
        """() => JSON.stringify([...document.querySelectorAll('table.samples tr.sample-row')]
            .map((row) => row.dataset.step)) === JSON.stringify(['0', '10', '20'])"""
    )
    assert page.locator("table.samples th.step").count() == 1


def test_follow_live_moves_the_slider_to_new_steps(live_server: LiveServer, page: Any) -> None:
    _store_run(live_server)
    _open(page, live_server)
    _wait_step(page, 20)
    page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'")

    # The trainer logs step 30's samples; the server's background poll picks them up.
    live_server.write_records(JOB, [make_record(step) for step in range(30, 32)])
    _write_samples(live_server, JOB, _samples_of(30))
    _wait_step(page, 30)
    assert page.inner_text(".samples-count") == "4 steps"
    assert page.locator(".samples-slider").input_value() == "3"
    assert _rows(page)[0]["preview"] == "step 30 answer 0: 391"

    # Not following: a new step joins the slider, the view stays where it is.
    page.click(".samples-prev")
    _wait_step(page, 20)
    assert not page.locator(".samples-follow").is_checked()
    _write_samples(live_server, JOB, _samples_of(40))
    page.wait_for_function(
        "() => document.querySelector('.samples-count').textContent === '5 steps'"
    )
    assert page.inner_text(".samples-step") == "step 20"
    assert page.locator(".samples-next").is_enabled()

    # Following again jumps to the newest.
    page.check(".samples-follow")
    _wait_step(page, 40)


def _click_chart_at_step(page: Any, chart: str, step: int) -> None:
    point = page.evaluate(
        """([id, step]) => {
            const plot = document.querySelector(`.chart[data-chart="${id}"]`).chart.plot;
            const box = plot.over.getBoundingClientRect();
            return { x: box.left + plot.valToPos(step, "x"), y: box.top + box.height / 2 };
        }""",
        [chart, step],
    )
    page.mouse.move(point["x"], point["y"])
    page.mouse.click(point["x"], point["y"])


def test_a_click_on_a_chart_point_shows_that_steps_samples(
    live_server: LiveServer, page: Any
) -> None:
    _store_run(live_server)
    _open(page, live_server)
    _wait_step(page, 20)

    page.locator('.chart[data-chart="losses"]').scroll_into_view_if_needed()
    _click_chart_at_step(page, "losses", 10)
    _wait_step(page, 10)
    assert page.locator(".samples-note").is_hidden()
    assert not page.locator(".samples-follow").is_checked()

    # Step 16 has no samples: the nearest step with samples, 20.
    page.locator('.chart[data-chart="reward"]').scroll_into_view_if_needed()
    _click_chart_at_step(page, "reward", 16)
    _wait_step(page, 20)
    assert page.inner_text(".samples-note") == (
        "Step 16 has no samples: showing the nearest step with samples, 20."
    )
    # Halfway between two steps with samples: the earlier.
    page.locator('.chart[data-chart="reward"]').scroll_into_view_if_needed()
    _click_chart_at_step(page, "reward", 15)
    _wait_step(page, 10)
    page.locator('.chart[data-chart="reward"]').scroll_into_view_if_needed()
    _click_chart_at_step(page, "reward", 4)
    _wait_step(page, 0)
    assert "Step 4 has no samples" in page.inner_text(".samples-note")

    # A drag is a zoom, not a pick: the samples stay where they are.
    page.locator('.chart[data-chart="losses"]').scroll_into_view_if_needed()
    box = page.evaluate(
        """() => {
            const plot = document.querySelector('.chart[data-chart="losses"]').chart.plot;
            const b = plot.over.getBoundingClientRect();
            return { x0: b.left + plot.valToPos(18, "x"), x1: b.left + plot.valToPos(26, "x"),
                     y: b.top + b.height / 2 };
        }"""
    )
    page.mouse.move(box["x0"], box["y"])
    page.mouse.down()
    page.mouse.move(box["x1"], box["y"], steps=5)
    page.mouse.up()
    page.wait_for_function(
        "() => document.querySelector('.zoom-label').textContent.startsWith('steps 18')"
    )
    page.wait_for_timeout(400)
    assert page.inner_text(".samples-step") == "step 0"


def test_an_anomaly_found_in_the_samples_links_to_them(live_server: LiveServer, page: Any) -> None:
    _store_run(live_server)

    # The platform's sample detectors come later: their anomaly is added to the answer here.
    def add_samples_anomaly(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        if "start_step" not in route.request.url:
            body["anomalies"].append(
                {
                    "step": 12,
                    "type": "reward_hacking",
                    "severity": "warning",
                    "message": "Completions repeat the answer tag",
                    "source": "samples",
                    "sources": ["samples"],
                    "created_at": 1.0,
                }
            )
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/api/monitoring/rollouts/metrics/anomalies*", add_samples_anomaly)
    _open(page, live_server)
    _wait_step(page, 20)
    link = page.locator('#anomalies-panel tr[data-step="12"] .anomaly-samples')
    assert link.inner_text() == "samples at step 12 →"
    link.click()
    _wait_step(page, 10)  # 12 has none: the nearest, 10
    assert "Step 12 has no samples" in page.inner_text(".samples-note")


def test_a_run_without_samples_says_so_until_it_logs_some(
    live_server: LiveServer, page: Any
) -> None:
    _store_run(live_server, "plain", samples=False)
    _open(page, live_server, "plain")
    page.wait_for_selector(".samples-empty")
    assert page.inner_text(".samples-empty") == "No samples logged for this run."
    hint = page.inner_text(".samples-hint")
    assert "log_samples" in hint
    assert "rollout_data_dir" in hint
    assert page.locator(".samples-slider").count() == 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#samples-panel").screenshot(path=str(ARTIFACTS / "samples_panel_empty.png"))
    # A chart click with no samples does nothing wrong.
    _click_chart_at_step(page, "losses", 5)
    page.wait_for_timeout(400)
    assert page.locator(".samples-empty").is_visible()

    # The run starts logging samples: the panel appears without a reload.
    page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'")
    _write_samples(live_server, "plain", _samples_of(20))
    _wait_step(page, 20)
    assert page.locator(".samples-empty").count() == 0
    assert page.inner_text(".samples-count") == "1 step"


def test_a_verl_rollout_directory_shows_in_the_samples_panel(
    live_server: LiveServer, page: Any
) -> None:
    """verl's own dumps, `{job}_rollouts/{step}.jsonl`, next to the metrics: no log_samples."""
    job = "verlrun"
    rollouts = live_server.metrics_dir / f"{job}_rollouts"
    rollouts.mkdir()
    for step in (0, 5):
        lines = [
            {"input": f"Q{step}: what is {n} + {n}?", "output": f"It is {2 * n}.",
             "score": 1.0 if n % 2 else 0.0, "step": step, "gts": str(2 * n)}
            for n in range(3)
        ]  # fmt: skip
        (rollouts / f"{step}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    live_server.write_records(job, [make_record(step) for step in range(30)])
    live_server.write_status(job, "running", 29, 100)
    live_server.sync(job)

    _open(page, live_server, job)
    _wait_step(page, 5)

    rows = _rows(page)
    assert [(row["index"], row["reward"], row["preview"]) for row in rows] == [
        ("0", "0", "It is 0."),
        ("1", "1", "It is 2."),
        ("2", "0", "It is 4."),
    ]
    page.locator("#samples-panel").screenshot(path=str(ARTIFACTS / "samples_panel_verl.png"))
