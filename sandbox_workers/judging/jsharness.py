"""In-sandbox harness for JavaScript function-call and assert suites (Node.js).

Node cannot fork, so the tests of one completion run in one process, each in a
fresh ``vm`` context (separate globals, so module state does not carry over).
The protocol is the Python harness's (:mod:`sandbox_workers.judging.protocol`):
``spec.json`` in (every key there, none defaulted here: a spec without one is
reported as a ``sandbox_error`` record for every test), one marker per test on
stdin, read only after that test has finished, and one ``<marker> <json>`` line
per test on stdout.

Time limits follow the sandbox's rule: a test's limit is CPU time, with a
wall-clock backstop. ``vm``'s own ``timeout`` is wall time, so it is the
backstop; the CPU limit is kept by a watchdog thread (a ``worker_threads``
Worker sharing a few words of memory with the harness) that sleeps until the
process could at the earliest have used the running test's CPU time (every
usable CPU busy), looks at ``process.cpuUsage()`` (the whole process: every
thread) and, once the test is over its limit, interrupts it with SIGINT, which
``breakOnSigint`` turns into an exception inside the test's ``vm`` call.
Starting that thread costs ~40 ms of CPU (measured here), more than a whole
judgement, so it starts only when a test first reaches its CPU limit by the
clock without having used that much CPU; that test then runs again, watched
(see ``timedTest``). A host that is not busy never pays for it.

A ``vm`` context is not a security boundary (the jail is); it keeps honest
programs apart and stops stray ``console.log`` lines from passing for results.
``require`` inside the context is limited to pure modules (assert, util).
"""

from __future__ import annotations

__all__ = ["JS_HARNESS"]

JS_HARNESS = r"""'use strict';
const fs = require('fs');
const vm = require('vm');

const MESSAGE_LIMIT = 300;
const ALLOWED = new Set(['assert', 'node:assert', 'assert/strict', 'node:assert/strict',
                         'util', 'node:util']);
// Every key of spec.json (the worker's HarnessSpec), all of them always there.
const SPEC_KEYS = [
  'mode', 'source', 'count', 'tests', 'time_s', 'memory_mb', 'wall_factor',
  'wall_extra_s', 'wall_stretch', 'budget_s', 'stop_on_failure', 'marker_bytes',
  'fn_name', 'setup', 'entry_point', 'compiled', 'guard_names', 'program_code',
  'output_bytes', 'stderr_tail_bytes',
];
const spec = JSON.parse(fs.readFileSync('spec.json', 'utf8'));
const missingKeys = SPEC_KEYS.filter((key) => !Object.prototype.hasOwnProperty.call(spec, key));
if (missingKeys.length > 0) protocolError('spec.json lacks ' + missingKeys.join(', '));
const source = fs.readFileSync(spec.source, 'utf8');
const cpuLimitMs = Math.max(1, Math.ceil(spec.time_s * 1000));
const wallFactor = spec.wall_factor;
const wallExtraMs = spec.wall_extra_s * 1000;
const wallStretch = spec.wall_stretch;
const markerBytes = spec.marker_bytes;

// A spec this harness cannot follow: every test's record says so (the worker's fault).
function protocolError(message) {
  const record = JSON.stringify({ verdict: 'sandbox_error', message: short(message) });
  const markers = fs.readFileSync(0, 'latin1').split(/\s+/).filter((m) => m.length > 0);
  for (const marker of markers) fs.writeSync(1, '\n' + marker + ' ' + record + '\n');
  process.exit(0);
}

// A rejected promise nobody awaits must not take the remaining tests down.
process.on('unhandledRejection', () => {});
// The watchdog's SIGINT interrupts a test's vm call (breakOnSigint); one that
// lands between vm calls must not end the harness.
process.on('SIGINT', () => {});

// Shared with the watchdog: ints [0] a generation, odd while a test runs,
// [1] the generation the watchdog interrupted, [2] 1 once the watchdog runs,
// [3] why it interrupted (1: CPU limit, 2: wall backstop); then doubles: the
// process CPU time (us) at which the running test is over its limit, the
// test's start (ms, process.hrtime), its backstop and its cap (ms).
const shared = new SharedArrayBuffer(48);
const generation = new Int32Array(shared, 0, 4);
const timing = new Float64Array(shared, 16, 4);
const WATCHDOG = `'use strict';
const { workerData } = require('worker_threads');
const fs = require('fs');
const os = require('os');
const generation = new Int32Array(workerData, 0, 4);
const timing = new Float64Array(workerData, 16, 4);
const cpus = Math.max(1, os.availableParallelism ? os.availableParallelism() : os.cpus().length);
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
// Milliseconds this process's threads have waited for a CPU (schedstat run delay).
function waitedMs() {
  let ns = 0;
  try {
    for (const tid of fs.readdirSync('/proc/self/task')) {
      try {
        const stat = fs.readFileSync('/proc/self/task/' + tid + '/schedstat', 'latin1');
        ns += Number(stat.split(' ')[1]);
      } catch (_) {}
    }
  } catch (_) {}
  return ns / 1e6;
}
Atomics.store(generation, 2, 1);
Atomics.notify(generation, 2);
for (;;) {
  const running = Atomics.load(generation, 0);
  if (running % 2 === 0) {
    Atomics.wait(generation, 0, running);
    continue;
  }
  const [cpuDeadline, started, backstop, cap] = timing;
  const used = process.cpuUsage();
  const cpuLeftMs = (cpuDeadline - (used.user + used.system)) / 1000;
  const now = nowMs();
  const pastBackstop = now >= started + backstop;
  // Time spent waiting for a CPU does not count against the backstop (up to its cap).
  const wallDeadline = started + (pastBackstop ? Math.min(cap, backstop + waitedMs()) : backstop);
  const wallLeftMs = wallDeadline - now;
  if (cpuLeftMs <= 0 || wallLeftMs <= 0) {
    Atomics.store(generation, 3, cpuLeftMs <= 0 ? 1 : 2);
    Atomics.store(generation, 1, running);
    if (Atomics.load(generation, 0) === running) process.kill(process.pid, 'SIGINT');
    Atomics.wait(generation, 0, running);
  } else {
    const floor = pastBackstop ? 20 : 2;
    Atomics.wait(generation, 0, running, Math.min(wallLeftMs, Math.max(floor, cpuLeftMs / cpus)));
  }
}`;
const WATCHDOG_START_MS = 10000;
// null: not started yet; then whether it runs.
let watched = null;

// Started the first time a test outlives its CPU limit by the clock: a thread
// costs tens of ms of CPU to start, which most executions never need.
function startWatchdog() {
  watched = false;
  try {
    const watchdog = new (require('worker_threads').Worker)(WATCHDOG, {
      eval: true,
      workerData: shared,
      resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 },
    });
    watchdog.unref();
    // Its start-up is CPU time of this process: over before a test is measured.
    watched = Atomics.wait(generation, 2, 0, WATCHDOG_START_MS) !== 'timed-out' ||
      Atomics.load(generation, 2) === 1;
  } catch (_) {
    // No thread to watch CPU time: such a test is held to its CPU limit by the clock.
  }
}

function short(text) {
  text = String(text);
  return text.length <= MESSAGE_LIMIT ? text : text.slice(0, MESSAGE_LIMIT - 3) + '...';
}

function describe(error) {
  try {
    if (error && typeof error === 'object' && 'message' in error) {
      return short(`${error.name || 'Error'}: ${error.message}`);
    }
    return short(`thrown: ${String(error)}`);
  } catch (_) {
    return 'thrown: <unprintable>';
  }
}

function readMarker() {
  const buffer = Buffer.alloc(markerBytes);
  let got = 0;
  while (got < markerBytes) {
    let n;
    try {
      n = fs.readSync(0, buffer, got, markerBytes - got, null);
    } catch (error) {
      if (error.code === 'EAGAIN') continue;
      throw error;
    }
    if (n === 0) return null;
    got += n;
  }
  return buffer.toString('latin1', 0, markerBytes - 1);
}

function sandboxRequire(name) {
  if (ALLOWED.has(name)) return require(name);
  throw new Error(`require('${name}') is not available in tests`);
}

function freshContext() {
  const module = { exports: {} };
  return vm.createContext(
    { console, require: sandboxRequire, module, exports: module.exports },
    { microtaskMode: 'afterEvaluate' });
}

function remaining(deadline) {
  return Math.max(1, Math.ceil(deadline - performance.now()));
}

// How every vm call of a test runs: to the wall backstop, interruptible by the watchdog.
function limits(deadline) {
  return { timeout: remaining(deadline), breakOnSigint: true };
}

function jsonable(key, value) {
  const kind = Object.prototype.toString.call(value);
  if (kind === '[object Set]') return Array.from(value);
  if (kind === '[object Map]') return Object.fromEntries(value);
  if (typeof value === 'bigint') {
    return Number.isSafeInteger(Number(value)) ? Number(value) : String(value);
  }
  return value;
}

function callTest(program, args, deadline) {
  const context = freshContext();
  program.runInContext(context, limits(deadline));
  // Arguments are built inside the context, so `instanceof Array` holds for them.
  context.__rb_args = JSON.stringify(args);
  const name = spec.fn_name;
  const value = vm.runInContext(
    // The wrapper's own names start with __rb_, so any fn_name (f, args, ...) resolves
    // to the program's function, never to one of them.
    `(function () {
       const __rb_argv = JSON.parse(__rb_args);
       const __rb_exported = module.exports;
       const __rb_fn = typeof ${name} !== 'undefined' ? ${name}
         : (__rb_exported && typeof __rb_exported.${name} === 'function'
           ? __rb_exported.${name}
           : (typeof __rb_exported === 'function' ? __rb_exported : undefined));
       if (typeof __rb_fn !== 'function') {
         throw new ReferenceError('function ${name} is not defined');
       }
       return Array.isArray(__rb_argv) ? __rb_fn(...__rb_argv) : __rb_fn(__rb_argv);
     })()`, context, limits(deadline));
  let text;
  try {
    text = JSON.stringify(value === undefined ? null : value, jsonable);
  } catch (error) {
    return { verdict: 'returned', repr: short(String(value)) };
  }
  return { verdict: 'returned', value: JSON.parse(text === undefined ? 'null' : text) };
}

function assertTest(program, setup, testCase, deadline) {
  const context = freshContext();
  program.runInContext(context, limits(deadline));
  try {
    setup.runInContext(context, limits(deadline));
    if (spec.entry_point) {
      context.candidate = vm.runInContext(
        spec.entry_point, context, limits(deadline));
    }
    if (testCase) {
      testCase.runInContext(context, limits(deadline));
    } else if (spec.entry_point) {
      vm.runInContext(`check(${spec.entry_point})`, context, limits(deadline));
    }
  } catch (error) {
    if (error && (error.code === 'ERR_ASSERTION' || error.name === 'AssertionError')) {
      return { verdict: 'wrong_answer', message: describe(error) };
    }
    throw error;
  }
  return { verdict: 'accepted' };
}

function classify(error) {
  if (error && error.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') {
    return { verdict: 'time_limit', limit: 'wall' };
  }
  if (error && error.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
    return { verdict: 'time_limit', interrupted: true }; // by the watchdog: see attempt()
  }
  return { verdict: 'runtime_error', message: describe(error) };
}

function runTest(compiled, index, wallMs) {
  const started = performance.now();
  const deadline = started + wallMs;
  const test = spec.tests[index];
  try {
    return spec.mode === 'call'
      ? callTest(compiled.program, test, deadline)
      : assertTest(compiled.program, compiled.setup, compiled.cases[index], deadline);
  } catch (error) {
    return classify(error);
  }
}

// One run of a test; with the watchdog, interruptible at its CPU limit or its
// backstop, with vm's timeout at the backstop's cap; without, vm's timeout at wallMs.
function attempt(compiled, index, limitMs, wallMs) {
  const delayed = runDelayMs();
  const started = performance.now();
  const cpu = process.cpuUsage();
  let running = 0;
  if (watched) {
    timing[0] = cpu.user + cpu.system + limitMs * 1000;
    timing[1] = Number(process.hrtime.bigint()) / 1e6;
    timing[2] = wallMs;
    timing[3] = wallStretch * wallMs;
    running = Atomics.add(generation, 0, 1) + 1; // odd: this test runs
    Atomics.notify(generation, 0);
  }
  let record = runTest(compiled, index, watched ? wallStretch * wallMs : wallMs);
  if (watched) {
    Atomics.add(generation, 0, 1);
    Atomics.notify(generation, 0);
  }
  const used = process.cpuUsage(cpu);
  const fired = watched && Atomics.load(generation, 1) === running;
  if (fired) {
    record = { verdict: 'time_limit', limit: Atomics.load(generation, 3) === 2 ? 'wall' : 'cpu' };
  }
  const cpuMs = (used.user + used.system) / 1000;
  const wall = performance.now() - started;
  // Only worth a read when the test was off the CPU for a while.
  const waited = wall - cpuMs > 10 ? Math.max(0, runDelayMs() - delayed) : 0;
  return { record, fired, cpu: cpuMs, wall, waited };
}

// Milliseconds the main thread (where tests run) has waited for a CPU (schedstat).
function runDelayMs() {
  try {
    return Number(fs.readFileSync('/proc/thread-self/schedstat', 'latin1').split(' ')[1]) / 1e6;
  } catch (_) {
    return 0;
  }
}

// One test within its limits: CPU time, with the wall backstop (vm's timeout).
// Until the watchdog is needed, a test runs with its CPU limit as a wall-clock
// timeout: one that reaches it without having used that much CPU (slowed down
// by a busy host, or asleep) runs again from scratch, in a fresh context, with
// the watchdog and the backstop. Both runs are charged to the budget.
function timedTest(compiled, index, limitMs) {
  const backstopMs = Math.max(wallFactor * limitMs, limitMs + wallExtraMs);
  const spent = { cpu: 0, wall: 0, waited: 0 };
  let run;
  for (let tries = 0; ; tries++) {
    run = attempt(compiled, index, limitMs, watched ? backstopMs : limitMs);
    const limit = run.record.limit;
    const slowed = limit === 'wall' && watched === null && run.cpu < limitMs;
    // A late signal meant for the previous test (it raced that test's end).
    const stray = run.record.interrupted && !run.fired && tries === 0;
    if (slowed) startWatchdog();
    if (!(slowed && watched) && !stray) break;
    spent.cpu += run.cpu;
    spent.wall += run.wall;
    spent.waited += run.waited;
  }
  let record = run.record;
  if (record.interrupted || (record.limit === 'wall' && !watched)) {
    record = { verdict: 'time_limit', limit: 'cpu' }; // at its CPU limit (or no watchdog)
  }
  if (record.limit === 'cpu') {
    const note = watched === false ? ' [no watchdog thread: by the clock]' : '';
    record.message = `cpu limit: ${run.cpu.toFixed(0)} ms of CPU time used ` +
      `(in ${run.wall.toFixed(0)} ms)${note}`;
  } else if (record.limit === 'wall') {
    record.message = `wall backstop: still running after ${run.wall.toFixed(0)} ms with ` +
      `${run.cpu.toFixed(0)} ms of CPU time (sleeping or blocked)`;
  }
  delete record.limit;
  record.wall_ms = run.wall;
  record.cpu_ms = run.cpu;
  record.peak_memory_kb = process.resourceUsage().maxRSS;
  // Its CPU time, or its wall time less its wait for a CPU (as the worker charges).
  record.charged = Math.max(spent.cpu + run.cpu, spent.wall + run.wall - spent.waited - run.waited);
  return record;
}

function compileAll() {
  let program;
  try {
    program = new vm.Script(source, { filename: 'solution.js' });
  } catch (error) {
    return { failed: { verdict: 'compile_error', message: describe(error) } };
  }
  if (spec.mode === 'call') {
    if (typeof spec.fn_name !== 'string' || !/^[A-Za-z_$][\w$]*$/.test(spec.fn_name)) {
      return { failed: { verdict: 'sandbox_error', message: 'fn_name is not an identifier' } };
    }
    return { program };
  }
  try {
    const setup = new vm.Script(spec.setup, { filename: 'tests.js' });
    const cases = spec.tests.map(
      (c, i) => c === null ? null : new vm.Script(c, { filename: `case${i}.js` }));
    if (spec.entry_point && !/^[A-Za-z_$][\w$]*$/.test(spec.entry_point)) {
      throw new Error('entry_point is not an identifier');
    }
    return { program, setup, cases };
  } catch (error) {
    const message = 'test code does not compile: ' + describe(error);
    return { failed: { verdict: 'sandbox_error', message } };
  }
}

function main() {
  const compiled = compileAll();
  let budgetMs = spec.budget_s * 1000;
  for (let index = 0; index < spec.count; index++) {
    let record;
    if (compiled.failed) {
      record = compiled.failed;
    } else if (budgetMs <= 1) {
      record = { verdict: 'time_limit', message: 'not run: total time limit reached' };
    } else {
      record = timedTest(compiled, index, Math.min(cpuLimitMs, budgetMs));
      budgetMs -= record.charged;
      delete record.charged;
    }
    const marker = readMarker();
    if (marker === null) process.exit(2);
    fs.writeSync(1, '\n' + marker + ' ' + JSON.stringify(record) + '\n');
    const failed = record.verdict !== 'accepted' && record.verdict !== 'returned';
    if (spec.stop_on_failure && failed) break;
  }
}

main();
"""
