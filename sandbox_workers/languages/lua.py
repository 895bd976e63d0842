"""Lua 5.4 scripts, with a luaunit of our own for MultiPL-E's tests.

MultiPL-E's Lua tests are ``lu = require('luaunit')``, global ``test_*`` functions and
``os.exit(lu.LuaUnit.run())``. luaunit is not packaged for this host, so the test prelude
brings a small compatible one: as source text, not as a support file in the work
directory, which the program could overwrite before the tests load it.

The program runs first, in the same chunk, with every global in reach: the prelude
therefore never looks anything up in the program's globals. A guard run before the
program (``lua -e``) keeps a copy of the standard library as it was, behind the one door
the program cannot change (the string metatable, made read-only), and the prelude runs
the tests in a fresh environment built from that copy: a fake luaunit in
``package.loaded``/``package.preload`` or on disk, a replaced ``os.exit``, ``error``,
``pcall``, ``_ENV`` or ``_G`` metatable never reach them.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
    read_only,
)
from schemas import Limits

__all__ = ["Lua"]

# Run before the program. Besides keeping the copy (see the module docstring), it takes
# away what would reach past it: the debug library but its traceback (upvalues, the
# registry, metatables of any value), C modules (package.loadlib and the C searchers:
# native code), and bytecode (load, loadfile, dofile and require take source text only:
# Lua 5.4 runs hand-made bytecode unchecked). File handles' metatable is made read-only
# too: the tests write through it.
_GUARD = r"""do
  local G, next, rawget, rawset, select, error = _G, next, rawget, rawset, select, error
  local setmetatable, getmetatable = setmetatable, getmetatable
  local load, loadfile, package, format, OS = load, loadfile, package, string.format, os
  local function copy(t) local c = {} for k, v in next, t do c[k] = v end return c end
  G.load = function(chunk, name, mode, ...)
    if select("#", ...) > 0 then return load(chunk, name, "t", ...) end
    return load(chunk, name, "t")
  end
  G.loadfile = function(name, mode, ...)
    if select("#", ...) > 0 then return loadfile(name, "t", ...) end
    return loadfile(name, "t")
  end
  G.dofile = function(name)
    local chunk, message = loadfile(name, "t")
    if not chunk then error(message, 2) end
    return chunk()
  end
  package.searchers[2] = function(name)
    local path, message = package.searchpath(name, package.path)
    if not path then return message end
    local chunk, problem = loadfile(path, "t")
    if not chunk then
      error(format("error loading module '%s' from file '%s':\n\t%s", name, path, problem), 2)
    end
    return chunk, path
  end
  package.searchers[3], package.searchers[4] = nil, nil
  package.loadlib, package.cpath = nil, ""
  local traceback_only = {traceback = debug.traceback}
  G.debug, package.loaded.debug = traceback_only, traceback_only
  local globals, libraries = copy(G), {}
  for _, name in next, {"string", "table", "math", "os", "io", "coroutine", "utf8"} do
    libraries[name] = copy(G[name])
  end
  local function environment()
    local env = copy(globals)
    for name, library in next, libraries do env[name] = copy(library) end
    env._G = env
    env.rewardbus_stop_exits = function()
      rawset(OS, "exit", function() error("exit called during the tests", 2) end)
    end
    return setmetatable(env, {__index = function(_, key) return rawget(G, key) end})
  end
  local strings = getmetatable("")
  strings.__call = function(text)
    if text == "\0rewardbus" then return environment() end
    error("attempt to call a string value", 2)
  end
  strings.__metatable = false
  getmetatable(io.stderr).__metatable = false
end
"""

# The luaunit the tests get (a subset of luaunit 3.4's API), defined in the tests'
# environment: every global it uses is the guard's copy. Values are compared raw (no
# __eq, __len, __index or __tostring of the program's tables). LuaUnit.run() runs the
# global test* functions and returns the number that failed; only when it ran at least
# one and none failed does the end marker (armed by mark_tests_end) go to stderr.
_LUAUNIT = r"""rewardbus_luaunit = (function()
  local M = {LuaUnit = {}}
  local marker, running, failed, revealed = nil, false, false, false
  local function show(value, depth)
    if type(value) == "string" then return string.format("%q", value) end
    if type(value) ~= "table" then return tostring(value) end
    if (depth or 0) > 8 then return "{...}" end
    local parts, n = {}, rawlen(value)
    for i = 1, n do parts[i] = show(rawget(value, i), (depth or 0) + 1) end
    for k, v in next, value do
      if not (math.type(k) == "integer" and k >= 1 and k <= n) then
        parts[#parts + 1] = "[" .. show(k, 9) .. "]=" .. show(v, (depth or 0) + 1)
      end
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  local function same(a, b)
    if type(a) ~= type(b) then return false end
    if type(a) ~= "table" then return a == b end
    if rawequal(a, b) then return true end
    for k, v in next, a do if not same(v, rawget(b, k)) then return false end end
    for k in next, b do if rawget(a, k) == nil then return false end end
    return true
  end
  local function check(ok, what, extra)
    if not ok then
      error(extra ~= nil and (what .. "\n" .. tostring(extra)) or what, 3)
    end
  end
  function M.assertEquals(actual, expected, extra)
    check(same(actual, expected), "assertEquals failed: expected " .. show(expected)
      .. ", actual " .. show(actual), extra)
  end
  function M.assertNotEquals(actual, expected, extra)
    check(not same(actual, expected), "assertNotEquals failed: both " .. show(actual), extra)
  end
  function M.assertItemsEquals(actual, expected, extra)
    local ok = type(actual) == "table" and type(expected) == "table"
    local used = {}
    if ok then
      for _, want in next, expected do
        local found = false
        for k, got in next, actual do
          if not used[k] and same(got, want) then used[k], found = true, true break end
        end
        ok = ok and found
      end
      for k in next, actual do ok = ok and used[k] == true end
    end
    check(ok, "assertItemsEquals failed: expected " .. show(expected)
      .. ", actual " .. show(actual), extra)
  end
  function M.assertAlmostEquals(actual, expected, margin, extra)
    margin = margin or 1e-11
    check(type(actual) == "number" and type(expected) == "number"
      and math.abs(actual - expected) <= margin,
      "assertAlmostEquals failed: expected " .. show(expected) .. ", actual " .. show(actual),
      extra)
  end
  local function predicate(name, holds)
    M[name] = function(value, extra)
      check(holds(value), name .. " failed: " .. show(value), extra)
    end
  end
  predicate("assertTrue", function(value) return value == true end)
  predicate("assertFalse", function(value) return value == false end)
  predicate("assertEvalToTrue", function(value) return value end)
  predicate("assertEvalToFalse", function(value) return not value end)
  predicate("assertNil", function(value) return value == nil end)
  predicate("assertNotNil", function(value) return value ~= nil end)
  function M.assertError(f, ...) check(not pcall(f, ...), "assertError failed: no error") end
  function M.assertStrContains(text, part, extra)
    check(type(text) == "string" and type(part) == "string" and string.find(text, part, 1, true),
      "assertStrContains failed: " .. show(part) .. " not in " .. show(text), extra)
  end
  M.assertIsTrue, M.assertIsFalse, M.assertIsNil, M.assertIsNotNil =
    M.assertTrue, M.assertFalse, M.assertNil, M.assertNotNil
  M.assert_equals, M.assert_true, M.assert_false, M.assert_nil =
    M.assertEquals, M.assertTrue, M.assertFalse, M.assertNil
  local function reveal()
    if marker ~= nil and not failed and not revealed then
      revealed = true
      local text = {}
      for i = 1, #marker[1] do text[i] = string.char(marker[1][i] ~ marker[2][i]) end
      io.stderr:write(table.concat(text))
    end
  end
  function M.LuaUnit.run()
    if running then error("LuaUnit.run called during the tests", 2) end
    running = true
    local names = {}
    for name, value in next, _ENV do
      if type(name) == "string" and type(value) == "function"
          and string.lower(string.sub(name, 1, 4)) == "test" then
        names[#names + 1] = name
      end
    end
    table.sort(names)
    local failures = 0
    for i = 1, #names do
      local ok, problem = pcall(rawget(_ENV, names[i]))
      if not ok then
        failures = failures + 1
        io.stderr:write(names[i], ": ", tostring(problem), "\n")
      end
    end
    running = false
    if #names == 0 then
      failed = true
      io.stderr:write("assertion failed: no test functions found\n")
      return 1
    end
    if failures > 0 then
      failed = true
      io.stderr:write(string.format("assertion failed: %d of %d tests failed\n", failures, #names))
    else
      print(string.format("Ran %d tests, OK", #names))
      io.stdout:flush()
      reveal()
    end
    return failures
  end
  M.run = M.LuaUnit.run
  rewardbus_arm = function(masked, key) if marker == nil then marker = {masked, key} end end
  rewardbus_done = function() if not failed then reveal() end end
  return M
end)()
"""

# Between the program and the tests: the tests' own environment (see the module
# docstring), exits stopped for the program's code, and require('luaunit') giving ours.
_TESTS_FOLLOW = "-- rewardbus: the tests follow\n"
_REQUIRE_OURS = """do
  local require_module = require
  require = function(name, ...)
    if name == "luaunit" then return rewardbus_luaunit end
    return require_module(name, ...)
  end
end
"""
_PRELUDE = (
    f'\nlocal _ENV = ("\\0rewardbus")()\nrewardbus_stop_exits()\n'
    f"{_LUAUNIT}{_REQUIRE_OURS}{_TESTS_FOLLOW}"
)


class Lua(Language):
    """Lua 5.4 (``lua5.4 -E``: no ``LUA_INIT``/``LUA_PATH`` from the environment)."""

    name = "lua"
    aliases = frozenset({"lua", "lua5.4", "lua54"})
    fence_tags = frozenset({"lua"})
    extension = "lua"
    test_prelude = _PRELUDE

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        return discover_binary(
            self.name,
            "lua5.4",
            ["-v"],
            version=_lua_version,
            key="lua",
            mounts=lambda lua: read_only(lua.parent),
        )

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # The marker's mask and key go to our luaunit right after the prelude; it prints
        # the marker when LuaUnit.run() ran the tests and none failed (the tests then
        # exit through os.exit), or, for tests without luaunit, when the chunk's end is
        # reached without a failure.
        head, follow, rest = tests.partition(_TESTS_FOLLOW)
        if not follow:
            return None
        masked, key = masked_marker(marker)
        arm = f"rewardbus_arm({{{byte_list(masked)}}}, {{{byte_list(key)}}});\n"
        return f"{head}{follow}{arm}{rest}\n;rewardbus_done()\n"

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(argv=(toolchain.paths["lua"], "-E", "-e", _GUARD, entry))


def _lua_version(banner: str) -> str:
    match = re.search(r"Lua (\d+\.\d+\.\d+)", banner)
    return f"lua-{match.group(1)}" if match else banner
