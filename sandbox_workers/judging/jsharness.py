"""In-sandbox harness for JavaScript function-call and assert suites (Node.js).

Node cannot fork, so the tests of one completion run in one process, each in a
fresh ``vm`` context (separate globals, so module state does not carry over) with
``vm``'s own timeout for runaway loops. The protocol is the Python harness's
(:mod:`sandbox_workers.judging.pyharness`): ``spec.json`` in, one marker per test
on stdin, read only after that test has finished, and one ``<marker> <json>``
line per test on stdout.

A ``vm`` context is not a security boundary (the jail is); it keeps honest
programs apart and stops stray ``console.log`` lines from passing for results.
``require`` inside the context is limited to pure modules (assert, util).
"""

from __future__ import annotations

__all__ = ["JS_HARNESS"]

JS_HARNESS = r"""'use strict';
const fs = require('fs');
const vm = require('vm');

const MARKER_BYTES = 33;
const MESSAGE_LIMIT = 300;
const ALLOWED = new Set(['assert', 'node:assert', 'assert/strict', 'node:assert/strict',
                         'util', 'node:util']);
const spec = JSON.parse(fs.readFileSync('spec.json', 'utf8'));
const source = fs.readFileSync(spec.source, 'utf8');
const timeoutMs = Math.max(1, Math.ceil(spec.time_s * 1000));

// A rejected promise nobody awaits must not take the remaining tests down.
process.on('unhandledRejection', () => {});

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
  const buffer = Buffer.alloc(MARKER_BYTES);
  let got = 0;
  while (got < MARKER_BYTES) {
    let n;
    try {
      n = fs.readSync(0, buffer, got, MARKER_BYTES - got, null);
    } catch (error) {
      if (error.code === 'EAGAIN') continue;
      throw error;
    }
    if (n === 0) return null;
    got += n;
  }
  return buffer.toString('latin1', 0, MARKER_BYTES - 1);
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
  program.runInContext(context, { timeout: remaining(deadline) });
  // Arguments are built inside the context, so `instanceof Array` holds for them.
  context.__rb_args = JSON.stringify(args);
  const name = spec.fn_name;
  const value = vm.runInContext(
    `(function () {
       const args = JSON.parse(__rb_args);
       const exported = module.exports;
       const f = typeof ${name} !== 'undefined' ? ${name}
         : (exported && typeof exported.${name} === 'function' ? exported.${name}
         : (typeof exported === 'function' ? exported : undefined));
       if (typeof f !== 'function') throw new ReferenceError('function ${name} is not defined');
       return Array.isArray(args) ? f(...args) : f(args);
     })()`, context, { timeout: remaining(deadline) });
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
  program.runInContext(context, { timeout: remaining(deadline) });
  try {
    setup.runInContext(context, { timeout: remaining(deadline) });
    if (spec.entry_point) {
      context.candidate = vm.runInContext(
        spec.entry_point, context, { timeout: remaining(deadline) });
    }
    if (testCase) {
      testCase.runInContext(context, { timeout: remaining(deadline) });
    } else if (spec.entry_point) {
      vm.runInContext(`check(${spec.entry_point})`, context, { timeout: remaining(deadline) });
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
    return { verdict: 'time_limit', message: 'time limit exceeded' };
  }
  return { verdict: 'runtime_error', message: describe(error) };
}

function compileAll() {
  let program;
  try {
    program = new vm.Script(source, { filename: 'solution.js' });
  } catch (error) {
    return { failed: { verdict: 'compile_error', message: describe(error) } };
  }
  if (spec.mode === 'call') {
    if (!/^[A-Za-z_$][\w$]*$/.test(spec.fn_name || '')) {
      return { failed: { verdict: 'sandbox_error', message: 'fn_name is not an identifier' } };
    }
    return { program };
  }
  try {
    const setup = new vm.Script(spec.setup || '', { filename: 'tests.js' });
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
  for (let index = 0; index < spec.tests.length; index++) {
    const test = spec.tests[index];
    let record;
    if (compiled.failed) {
      record = compiled.failed;
    } else if (budgetMs <= 1) {
      record = { verdict: 'time_limit', message: 'not run: total time limit reached' };
    } else {
      const started = performance.now();
      const cpu = process.cpuUsage();
      const deadline = started + Math.min(timeoutMs, budgetMs);
      try {
        record = spec.mode === 'call'
          ? callTest(compiled.program, test, deadline)
          : assertTest(compiled.program, compiled.setup, compiled.cases[index], deadline);
      } catch (error) {
        record = classify(error);
      }
      const used = process.cpuUsage(cpu);
      record.wall_ms = performance.now() - started;
      record.cpu_ms = (used.user + used.system) / 1000;
      record.peak_memory_kb = process.resourceUsage().maxRSS;
      budgetMs -= record.wall_ms;
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
