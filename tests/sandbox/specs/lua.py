"""Lua 5.4: luaunit suites (our own luaunit, see sandbox_workers/languages/lua.py)."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_ADD_WRONG = "local function add(a, b)\n  return a * b\nend\n"
_FAKE_LUAUNIT = "{LuaUnit = {run = function() return 0 end}, assertEquals = function() end}"

SPEC = LanguageSpec(
    language="lua",
    programs={
        Verdict.ACCEPTED: 'local a, b = io.read("n", "n")\nprint(a + b)\n',
        Verdict.WRONG_ANSWER: "print(0)\n",
        Verdict.RUNTIME_ERROR: "error('boom')\n",
        Verdict.TIME_LIMIT: "local x = 0\nwhile true do x = x + 1 end\n",
        Verdict.MEMORY_LIMIT: "local keep, i = {}, 0\n"
        "while true do i = i + 1; keep[i] = string.rep('x', 1 << 20) .. i end\n",
        Verdict.OUTPUT_LIMIT: "while true do print(string.rep('x', 1000)) end\n",
    },
    assert_tests="lu = require('luaunit')\n\n"
    "function test_humaneval()\n"
    "local candidate = add\n"
    "    lu.assertEquals(candidate(2, 3), 5)\n"
    "    lu.assertEquals(candidate(-1, 1), 0)\n"
    "end\n\n"
    "os.exit(lu.LuaUnit.run())\n",
    assert_good="local function add(a, b)\n  return a + b\nend\n",
    assert_bad=_ADD_WRONG,
    exit_hacks={
        "exit-in-add": "local function add(a, b)\n  os.exit(0)\nend\n",
        "exit-at-load": f"{_ADD_WRONG}os.exit(0)\n",
        "exit-true-in-add": "function add(a, b)\n  os.exit(true)\nend\n",
        "saved-exit-in-add": "local real_exit = os.exit\n"
        "local function add(a, b)\n  real_exit(0)\nend\n",
        "saved-exit-closing-the-state-in-add": "local real_exit = os.exit\n"
        "local function add(a, b)\n  real_exit(0, true)\nend\n",
        "return-at-load": f"{_ADD_WRONG}do return end\n",
        "finalizer-exit-in-add": "local real_exit = os.exit\n"
        "local function add(a, b)\n"
        "  setmetatable({}, {__gc = function() real_exit(0) end})\n"
        "  collectgarbage()\n"
        "  return a * b\nend\n",
        "exit-replaced-then-exit-at-load": "local real_exit = os.exit\n"
        f"os.exit = function() real_exit(0) end\n{_ADD_WRONG}os.exit(1)\n",
    },
    disable_hacks={
        "fake-luaunit-loaded": f"{_ADD_WRONG}package.loaded.luaunit = {_FAKE_LUAUNIT}\n",
        "fake-luaunit-preloaded": f"{_ADD_WRONG}"
        f"package.preload.luaunit = function() return {_FAKE_LUAUNIT} end\n",
        "fake-luaunit-file": f"{_ADD_WRONG}local file = io.open('luaunit.lua', 'w')\n"
        f"file:write('return {_FAKE_LUAUNIT}')\nfile:close()\n"
        "package.loaded.luaunit = nil\n",
        "exit-status-replaced": f"{_ADD_WRONG}local real_exit = os.exit\n"
        "os.exit = function() real_exit(0) end\n",
        "error-switched-off": f"{_ADD_WRONG}error = function() end\n",
        "pcall-always-true": f"{_ADD_WRONG}pcall = function() return true end\n",
        "test-functions-replaced": f"{_ADD_WRONG}setmetatable(_G, {{__newindex = "
        "function(t, k, v)\n"
        "  if type(k) == 'string' and k:sub(1, 4) == 'test' then v = function() end end\n"
        "  rawset(t, k, v)\nend})\n",
        "string-metatable-replaced": f"{_ADD_WRONG}if debug.setmetatable then\n"
        "  local fake = setmetatable({rewardbus_stop_exits = function() end,\n"
        "    error = function() end, pcall = function() return true end}, {__index = _G})\n"
        "  debug.setmetatable('', {__index = string, __call = function() return fake end})\n"
        "end\n",
        "environment-replaced": f"{_ADD_WRONG}local real_exit = os.exit\n"
        "_ENV = setmetatable({os = {exit = function() real_exit(0) end}}, {__index = _G})\n",
    },
    checker="local function number(path)\n"
    "  local file = assert(io.open(path))\n"
    "  local value = file:read('n')\n"
    "  file:close()\n"
    "  return value\n"
    "end\n"
    "local n, output, answer = number(arg[1]), number(arg[2]), number(arg[3])\n"
    "os.exit((output - answer) % n == 0 and 0 or 1)\n",
)
