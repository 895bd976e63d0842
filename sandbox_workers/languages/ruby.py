"""Ruby scripts on the system ``ruby``.

MultiPL-E's Ruby tests are a ``Test::Unit::TestCase`` whose tests test/unit runs at
process exit (autorun); everything here about assert suites is about a program that,
run first in the same file, would end the process early or fake those tests.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    byte_list,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
)
from schemas import Limits

__all__ = ["Ruby"]

# Core methods the tests' checks rest on (equality, raise, require...), kept by a file
# loaded with -r before the program as they were before any program code ran; the test
# prelude compares them after the program ran. By owner: instance methods.
_CHECKED: dict[str, tuple[str, ...]] = {
    "BasicObject": ("==", "!", "!=", "equal?", "instance_eval"),
    "Kernel": (
        "class", "is_a?", "kind_of?", "instance_of?", "respond_to?",
        "raise", "fail", "require", "require_relative", "load", "set_trace_func",
    ),
    "Module": ("==", "===", "<", "<=", "instance_method", "define_method", "class_eval"),
    "UnboundMethod": ("==", "bind_call"),
    "Integer": ("==", "===", "eql?", "equal?", "<=>", "coerce", "^", "+"),
    "Float": ("==", "===", "eql?", "<=>", "coerce"),
    "String": ("==", "===", "eql?", "<=>", "length", "encoding"),
    "Symbol": ("==", "==="),
    "Array": ("==", "eql?", "length", "[]", "each", "zip", "map", "pack", "include?", "all?"),
    "Hash": ("==", "eql?", "length", "[]", "key?", "each", "all?"),
    "Range": ("each",),
    "Enumerable": ("all?",),
    "NilClass": ("==",),
    "TrueClass": ("==",),
    "FalseClass": ("==",),
    "Comparable": ("==",),
    "Process.singleton_class": ("exit!",),
    "ObjectSpace.singleton_class": ("each_object",),
    "TracePoint": ("enabled?",),
}  # fmt: skip
_CHECKED_COUNT = sum(len(names) for names in _CHECKED.values())
_GUARD_FILE = "rewardbus_guard.rb"
_GUARD = (
    "module RewardbusGuard\n  ORIGINALS = [\n"
    + "".join(
        f"    [{owner}, :{name}, {owner}.instance_method(:{name})].freeze,\n"
        for owner, names in _CHECKED.items()
        for name in names
    )
    + "  ].freeze\nend\n"
)

# Between the program and the tests. The program has run; find what it could have done
# to the tests, and refuse to run them (see _MARKED) when it did:
# - a core method of _CHECKED redefined or shadowed by a prepended module
#   (`class Integer; def ==(o) = true; end`, `module Kernel; def raise(*) = nil; end`);
# - test/unit loaded, and so patched, before the tests load it;
# - a TracePoint left enabled (it could patch test/unit as it loads), or a trace function.
# Refusal is a local variable, set by plain assignment: nothing the program redefined
# runs on the way from a detection to the decision. Every check must have run (a
# patched Array#each would skip them all).
# Then exit, exit! and exec during the tests raise a clear failure instead of ending the
# process; a program that kept the real ones (alias, Process.method) is caught by the
# end marker.
_PRELUDE = f"""
rewardbus_refused = nil
rewardbus_checked = 0
RewardbusGuard::ORIGINALS.each do |owner, name, original|
  rewardbus_checked += 1
  unless owner.instance_method(name) == original
    rewardbus_refused ||= "the program redefined #{{owner}}##{{name}}"
  end
end
unless rewardbus_checked == {_CHECKED_COUNT}
  rewardbus_refused ||= "the program changed how the core methods are checked"
end
if defined?(::Test::Unit) || $LOADED_FEATURES.any? {{ |path| path.include?("test/unit") }}
  rewardbus_refused ||= "the program loaded test/unit before the tests"
end
ObjectSpace.each_object(TracePoint) do |trace|
  rewardbus_refused ||= "the program left a TracePoint enabled" if trace.enabled?
end
set_trace_func(nil)
rewardbus_exit = Process.method(:exit!)
[Kernel, Process].each do |owner|
  %i[exit exit! exec].each do |name|
    owner.define_singleton_method(name) {{ |*| raise "exit called during the tests" }}
  end
end
module Kernel
  %i[exit exit! exec].each do |name|
    define_method(name) {{ |*| raise "exit called during the tests" }}
    private name
  end
end
"""

# After test/unit tests: a strict assert_equal, then the tests run now (not at exit).
# test/unit compares with `expected == actual`, and Integer#==, String#==, Array#== hand an
# operand of another class to *its* ==, so an `add` returning an object whose == is always
# true would pass: values must be of the expected class too (any two numeric classes
# compare as numbers), through arrays and hashes, read with the core methods (checked by
# the prelude) rather than the object's own.
_TEST_UNIT_RUN = """
  rewardbus_class = Kernel.instance_method(:class)
  rewardbus_length = Array.instance_method(:length)
  rewardbus_at = Array.instance_method(:[])
  rewardbus_size = Hash.instance_method(:length)
  rewardbus_key = Hash.instance_method(:key?)
  rewardbus_fetch = Hash.instance_method(:[])
  rewardbus_numeric = [Integer, Float, Rational].freeze
  rewardbus_same = lambda do |expected, actual|
    want = rewardbus_class.bind_call(expected)
    got = rewardbus_class.bind_call(actual)
    if want == Array
      got == Array && rewardbus_length.bind_call(expected) == rewardbus_length.bind_call(actual) &&
        (0...rewardbus_length.bind_call(expected)).all? do |i|
          rewardbus_same.call(rewardbus_at.bind_call(expected, i),
                              rewardbus_at.bind_call(actual, i))
        end
    elsif want == Hash
      got == Hash && rewardbus_size.bind_call(expected) == rewardbus_size.bind_call(actual) &&
        expected.all? do |key, value|
          rewardbus_key.bind_call(actual, key) &&
            rewardbus_same.call(value, rewardbus_fetch.bind_call(actual, key))
        end
    else
      want == got || (rewardbus_numeric.include?(want) && rewardbus_numeric.include?(got))
    end
  end
  Test::Unit::Assertions.class_eval do
    loose = instance_method(:assert_equal)
    define_method(:assert_equal) do |expected, actual, message = nil|
      unless rewardbus_same.call(expected, actual)
        raise Test::Unit::AssertionFailedError, "<#{expected.inspect}> expected but was a " \\
          "#{rewardbus_class.bind_call(actual)}"
      end
      loose.bind_call(self, expected, actual, message)
    end
  end
  rewardbus_passed = Test::Unit::AutoRunner.run == true
"""

# After the tests: refuse (see _PRELUDE), or run them (test/unit) and print the marker,
# built from its mask and key, only when they ran and passed.
_MARKED = """
if rewardbus_refused
  $stderr.write("\\nassertions cannot run: #{{rewardbus_refused}}\\n")
  $stderr.flush
  rewardbus_exit.call(1)
else
  rewardbus_passed = true
{run}  if rewardbus_passed
    rewardbus_masked = [{masked}]
    rewardbus_mask = [{key}]
    $stderr.write(rewardbus_masked.zip(rewardbus_mask).map {{ |a, b| a ^ b }}.pack("C*"))
    $stderr.flush
  else
    $stderr.write("\\nassertion failed: the tests did not pass\\n")
    $stdout.flush
    $stderr.flush
    rewardbus_exit.call(1)
  end
end
"""

# Gems that ship with Ruby but live outside its standard library directory: test-unit
# (MultiPL-E's tests) with power_assert, and prime and matrix, which solutions require.
# Their load paths, found once by the trusted host ruby at discovery.
_BUNDLED_LIBS = (
    "print %w[test-unit power_assert prime matrix]"
    ".filter_map { |g| Gem::Specification.find_all_by_name(g).max_by(&:version) }"
    '.flat_map(&:full_require_paths).join(":")'
)

_TEST_UNIT = re.compile(r"\bTest::Unit\b|\btest/unit\b")


class Ruby(Language):
    """The system ruby without RubyGems; ``RUBYOPT``/``RUBYLIB`` never reach it."""

    name = "ruby"
    aliases = frozenset({"ruby", "rb"})
    fence_tags = frozenset({"ruby", "rb"})
    extension = "rb"
    test_prelude = _PRELUDE

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        ruby = resolve_binary("ruby")
        if ruby is None:
            return None
        banner = probe_version([str(ruby), "--version"])
        if banner is None:
            return None
        gems = probe_version([str(ruby), "-e", _BUNDLED_LIBS]) or ""
        libs = [lib for lib in gems.split(":") if lib]
        # The interpreter's library and (on Debian) the bundled gems live under /usr/lib,
        # which the jail's read-only /usr already shows; gems elsewhere are mounted.
        elsewhere = [lib for lib in libs if not Path(lib).is_relative_to("/usr")]
        return Toolchain(
            language=self.name,
            version=_ruby_version(banner),
            paths={"ruby": str(ruby), "libs": ":".join(libs)},
            mounts=read_only(ruby.parent, *elsewhere),
        )

    def mark_tests_end(self, tests: str, marker: str) -> str:
        masked, key = masked_marker(marker)
        run = _TEST_UNIT_RUN if _TEST_UNIT.search(tests) else ""
        return tests + _MARKED.format(run=run, masked=byte_list(masked), key=byte_list(key))

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        libs = [f"-I{lib}" for lib in toolchain.paths["libs"].split(":") if lib]
        return Launch(
            argv=(
                toolchain.paths["ruby"],
                # RubyGems costs ~90 ms of CPU per start (most of a trivial program's run);
                # the bundled gems programs and tests use are on the load path instead.
                "--disable-gems",
                *libs,
                f"-r./{_GUARD_FILE}",
                entry,
            ),
            files={_GUARD_FILE: _GUARD.encode()},
            # Ruby opens the program first (then the guard): a warm pool forks there.
            warm_after=entry,
        )


def _ruby_version(banner: str) -> str:
    match = re.search(r"ruby (\d+\.\d+\.\d+)", banner)
    return f"ruby-{match.group(1)}" if match else banner
