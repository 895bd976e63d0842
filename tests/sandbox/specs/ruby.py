"""Ruby: test/unit suites (autorun at exit), as MultiPL-E writes them."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_ADD_WRONG = "def add(a, b)\n  a * b\nend\n"

SPEC = LanguageSpec(
    language="ruby",
    programs={
        Verdict.ACCEPTED: "a, b = gets.split.map(&:to_i)\nputs a + b\n",
        Verdict.WRONG_ANSWER: "puts 0\n",
        Verdict.RUNTIME_ERROR: "raise 'boom'\n",
        Verdict.TIME_LIMIT: "x = 0\nx += 1 while true\n",
        Verdict.MEMORY_LIMIT: "keep = []\nloop { keep << 'x' * (1 << 24) }\n",
        Verdict.OUTPUT_LIMIT: "loop { puts 'x' * 1000 }\n",
    },
    assert_tests="require 'test/unit'\n"
    "class TestHumanEval < Test::Unit::TestCase\n"
    "  def test_add\n"
    "    candidate = method(:add)\n"
    "    assert_equal(5, candidate.call(2, 3))\n"
    "    assert_equal(0, candidate.call(-1, 1))\n"
    "  end\n"
    "end\n",
    assert_good="def add(a, b)\n  a + b\nend\n",
    assert_bad=_ADD_WRONG,
    exit_hacks={
        "exit-in-add": "def add(a, b)\n  exit 0\nend\n",
        "exit-at-load": f"{_ADD_WRONG}exit 0\n",
        "exit!-in-add": "def add(a, b)\n  exit!(0)\nend\n",
        "process-exit!-at-load": f"{_ADD_WRONG}Process.exit!(0)\n",
        "kernel-exit-in-add": "def add(a, b)\n  Kernel.exit(true)\nend\n",
        "raise-systemexit-in-add": "def add(a, b)\n  raise SystemExit.new(0)\nend\n",
        "aliased-exit!-in-add": "alias rb_real_exit exit!\ndef add(a, b)\n  rb_real_exit(0)\nend\n",
        "saved-process-exit-in-add": "REAL_EXIT = Process.method(:exit!)\n"
        "def add(a, b)\n  REAL_EXIT.call(0)\nend\n",
        "exec-in-add": "def add(a, b)\n  exec('/usr/bin/true')\nend\n",
        "exec-at-load": f"{_ADD_WRONG}exec(RbConfig.ruby, '-e', '')\n",
        "spawn-and-wait": f"{_ADD_WRONG}Process.wait(spawn('/usr/bin/true'))\nexit!(0)\n",
        "at-exit-hook": f"{_ADD_WRONG}at_exit {{ exit!(0) }}\n",
        "end-of-script": f"{_ADD_WRONG}__END__\n",
        "syscall-exit-group-in-add": "def add(a, b)\n  syscall(231, 0)\nend\n",
        "signal-trapped-in-add": "Signal.trap('TERM') { Process.exit!(0) }\n"
        "def add(a, b)\n  Process.kill('TERM', Process.pid)\n  sleep 1\nend\n",
        "kill-main-thread-in-add": "def add(a, b)\n  Thread.main.kill\nend\n",
    },
    disable_hacks={
        "integer-equality-redefined": f"{_ADD_WRONG}class Integer\n  def ==(other) = true\nend\n",
        "integer-equality-prepended": f"{_ADD_WRONG}"
        "Integer.prepend(Module.new { def ==(other) = true })\n",
        "always-equal-result": "def add(a, b)\n  fake = Object.new\n"
        "  def fake.==(other) = true\n  fake\nend\n",
        "raise-switched-off": f"{_ADD_WRONG}module Kernel\n  def raise(*) = nil\nend\n",
        "assert-equal-patched": f"{_ADD_WRONG}require 'test/unit'\n"
        "module Test::Unit::Assertions\n  def assert_equal(*) = nil\nend\n",
        "autorun-switched-off": f"{_ADD_WRONG}require 'test/unit'\n"
        "Test::Unit::AutoRunner.need_auto_run = false\n",
        "trace-patches-test-unit": f"{_ADD_WRONG}$trace = TracePoint.new(:end) do |tp|\n"
        "  if tp.self.name == 'Test::Unit::Assertions'\n"
        "    tp.self.define_method(:assert_equal) { |*| nil }\n"
        "  end\n"
        "end\n"
        "$trace.enable\n",
        "require-patches-test-unit": f"{_ADD_WRONG}module Kernel\n"
        "  alias rb_real_require require\n"
        "  def require(name)\n"
        "    loaded = rb_real_require(name)\n"
        "    if name == 'test/unit'\n"
        "      Test::Unit::Assertions.define_method(:assert_equal) { |*| nil }\n"
        "    end\n"
        "    loaded\n"
        "  end\n"
        "end\n",
    },
    checker="n = File.read(ARGV[0]).to_i\n"
    "output = File.read(ARGV[1]).to_i\n"
    "answer = File.read(ARGV[2]).to_i\n"
    "exit((output - answer) % n == 0 ? 0 : 1)\n",
)
