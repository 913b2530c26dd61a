"""The page's stepper: controls, caption, styles and the script that moves the highlights.

The script reads the steps (`scenarios.picture._steps`) from the page's inline JSON block and, at each step,
marks the elements that carry the step's message: the sender (`step-src`) and receiver (`step-dst`) labels,
boxes and table rows, the operand rows it carries (`step-sent`), the result rows it wrote (`step-landed`),
the offsets entries that steered it (`step-entry`), and everything with its `data-message` (`step-message`:
arrow, timeline bar, table row); the timeline's cursor moves to its flight and the caption says it in
words. The keys: right and left arrows step, Home and End go to the first and last step, the space bar plays
and pauses.
"""

from __future__ import annotations

INTERVAL_MS = 900

CSS = """
#stepper { position: sticky; top: 0; z-index: 2; background: #fbfbf4; border: 1px solid #bbb; padding: 0.4em 0.8em;
  margin: 0.8em 0; }
#stepper button { font-size: 0.95em; margin-right: 0.2em; }
#step-count { margin-left: 0.6em; font-weight: bold; }
#caption { margin: 0.4em 0 0 0; min-height: 2.6em; }
#aggregated { margin: 0.3em 0 0 0; color: #8a4b00; font-size: 0.9em; }
.step-src { outline: 3px solid #1a7f37; font-weight: bold; }
.step-dst { outline: 3px dashed #0550ae; font-weight: bold; }
text.step-src { fill: #1a7f37; text-decoration: underline; }
text.step-dst { fill: #0550ae; text-decoration: underline; }
g.step-src rect { stroke: #1a7f37; stroke-width: 5; } g.step-dst rect { stroke: #0550ae; stroke-width: 5; }
rect.step-sent { stroke: #1a7f37; stroke-width: 3; fill-opacity: 1; }
rect.step-landed { stroke: #0550ae; stroke-width: 3; fill-opacity: 1; }
path.step-message { stroke-width: 5; } rect.step-message { stroke: #000; stroke-width: 1.5; }
rect.pair.step-message { stroke-width: 3; fill-opacity: 1; }
tr.step-message { background: #ffe9a8; } td.step-entry { background: #ffd54a; font-weight: bold; }
svg .arrow { transition: opacity 0.2s; } body.stepping svg .arrow:not(.step-message) { opacity: 0.15; }
#offsets tr.other { display: none; }
"""

CONTROLS = """<div id="stepper" role="group" aria-label="step through the messages">
<button id="step-first" title="first message (Home)">|&#x25C0; first</button>
<button id="step-back" title="previous message (left arrow)">&#x25C0; back</button>
<button id="step-play" title="play or pause (space)">play</button>
<button id="step-forward" title="next message (right arrow)">forward &#x25B6;</button>
<button id="step-last" title="last message (End)">last &#x25B6;|</button>
<span id="step-count"></span>
<p id="caption"></p>{notes}
</div>"""

JS = """
(function () {
  var data = JSON.parse(document.getElementById('steps-data').textContent);
  var steps = data.steps, at = -1, timer = null;
  var NAMES = ['step-lit', 'step-src', 'step-dst', 'step-sent', 'step-landed', 'step-entry', 'step-message'];
  var caption = document.getElementById('caption'), count = document.getElementById('step-count');
  var play = document.getElementById('step-play');
  function all(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }
  function mark(elements, name) { elements.forEach(function (e) { e.classList.add('step-lit', name); }); }
  function device(d) {
    return all('.device[data-device="' + d + '"], .device-box[data-device="' + d + '"], ' +
               '#devices tr[data-device="' + d + '"]');
  }
  function rows(d, side, span) {
    if (!span) { return []; }
    return all('[data-side="' + side + '"][data-device="' + d + '"][data-rows]').filter(function (e) {
      var r = e.getAttribute('data-rows').split(':');
      return span[0] <= +r[0] && +r[1] <= span[1] && +r[0] < +r[1];
    });
  }
  function carrying(k) {
    return all('[data-message="' + k + '"]').concat(all('[data-messages]').filter(function (e) {
      return (' ' + e.getAttribute('data-messages') + ' ').indexOf(' ' + k + ' ') >= 0;
    }));
  }
  function place(s) {
    var group = document.getElementById('cursor');
    if (!group) { return; }
    var span = document.getElementById('cursor-span'), line = document.getElementById('cursor-line');
    group.setAttribute('visibility', 'visible');
    span.setAttribute('x', s.cursor[0]);
    span.setAttribute('width', Math.max(2, s.cursor[1] - s.cursor[0]));
    line.setAttribute('x1', s.cursor[0]);
    line.setAttribute('x2', s.cursor[0]);
  }
  function show(n) {
    if (!steps.length) { return; }
    at = Math.max(0, Math.min(steps.length - 1, n));
    var s = steps[at];
    all('.step-lit').forEach(function (e) { NAMES.forEach(function (name) { e.classList.remove(name); }); });
    mark(device(s.src), 'step-src');
    mark(device(s.dst), 'step-dst');
    mark(rows(s.src, 'operand', s.src_rows), 'step-sent');
    mark(rows(s.dst, 'result', s.rows), 'step-landed');
    s.entries.forEach(function (e) {
      mark(all('#offsets tr[data-device="' + e[0] + '"][data-array="' + e[1] + '"] td[data-index="' + e[2] + '"]'),
           'step-entry');
    });
    mark(carrying(s.message), 'step-message');
    if (data.offsets_focus) {
      all('#offsets tr[data-device]').forEach(function (r) {
        var d = +r.getAttribute('data-device');
        r.classList.toggle('other', d !== s.src && d !== s.dst);
      });
    }
    place(s);
    caption.textContent = 'Step ' + (at + 1) + ' of ' + steps.length + ': ' + s.caption;
    count.textContent = 'step ' + (at + 1) + ' of ' + steps.length;
    document.body.classList.add('stepping');
    document.body.setAttribute('data-step', at);
  }
  function stop() {
    if (timer !== null) { clearInterval(timer); timer = null; }
    play.textContent = 'play';
    document.body.setAttribute('data-playing', 'no');
  }
  function toggle() {
    if (timer !== null) { stop(); return; }
    if (!steps.length) { return; }
    if (at >= steps.length - 1) { show(0); } else { show(at + 1); }
    play.textContent = 'pause';
    document.body.setAttribute('data-playing', 'yes');
    timer = setInterval(function () { if (at >= steps.length - 1) { stop(); } else { show(at + 1); } },
                        data.interval_ms);
  }
  var actions = {
    'step-first': function () { stop(); show(0); }, 'step-back': function () { stop(); show(at - 1); },
    'step-forward': function () { stop(); show(at + 1); }, 'step-last': function () { stop(); show(steps.length - 1); },
    'step-play': toggle
  };
  Object.keys(actions).forEach(function (id) {
    var button = document.getElementById(id);
    button.addEventListener('click', actions[id]);
    button.disabled = !steps.length;
  });
  var keys = {ArrowRight: 'step-forward', ArrowLeft: 'step-back', Home: 'step-first', End: 'step-last',
              ' ': 'step-play'};
  document.addEventListener('keydown', function (event) {
    var id = keys[event.key];
    if (!id || event.altKey || event.ctrlKey || event.metaKey) { return; }
    event.preventDefault();
    actions[id]();
  });
  caption.textContent = steps.length ? 'Press forward (or the right arrow key) to step through the ' +
    steps.length + ' messages in time order.' : 'This call moves no messages: there is nothing to step through.';
  count.textContent = steps.length ? 'step 0 of ' + steps.length : 'no steps';
  document.body.setAttribute('data-step', -1);
})();
"""
