"""Perl 5: the system perl running the script."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

# MultiPL-E's Perl shape, with core comparisons where it uses Test::Deep's eq_deeply (not
# a core module, and not installed here): a failed check exits 1.
_TESTS = """sub testhumaneval {
    my $candidate = \\&add;
        if($candidate->(2, 3) == 5) {
        print "ok!" }else{
        exit 1;
        }
        if($candidate->(-1, 1) == 0) {
        print "ok!" }else{
        exit 1;
        }
}

testhumaneval();
"""

_WRONG_ADD = "sub add { my ($a, $b) = @_; return $a * $b; }\n"

SPEC = LanguageSpec(
    language="perl",
    programs={
        Verdict.ACCEPTED: "my ($a, $b) = split ' ', <STDIN>;\nprint $a + $b, \"\\n\";\n",
        Verdict.WRONG_ANSWER: 'print "nope\\n";\n',
        Verdict.RUNTIME_ERROR: 'die "boom";\n',
        Verdict.TIME_LIMIT: "1 while 1;\n",
        Verdict.MEMORY_LIMIT: "my $s = 'x' x 1024; $s .= $s while 1;\n",
        Verdict.OUTPUT_LIMIT: 'print "y\\n" while 1;\n',
    },
    assert_tests=_TESTS,
    assert_good="sub add { my ($a, $b) = @_; return $a + $b; }\n",
    assert_bad=_WRONG_ADD,
    exit_hacks={
        "exit-in-add": "sub add { exit 0; }\n",
        "exit-at-load": "sub add { return 0; }\nexit 0;\n",
        "exit-in-begin": "BEGIN { exit 0; }\nsub add { return 0; }\n",
        "posix-_exit": "use POSIX ();\nsub add { POSIX::_exit(0); }\n",
        "exec": "sub add { exec $^X, '-e', 'exit 0'; }\n",
        "signal-handler-exits-0": "$SIG{TERM} = sub { exit 0 };\n"
        "sub add { kill 'TERM', $$; sleep 5; }\n",
        # The tests' failing check exits 1; the program's END block (run after ours) turns
        # that into 0.
        "end-block-status-0": f"END {{ $? = 0; }}\n{_WRONG_ADD}",
        "die-handler-exits-0": "$SIG{__DIE__} = sub { exit 0 };\nsub add { die 'no'; }\n",
        # The rest of the file is data, never compiled: the tests never run.
        "end-of-code": f"{_WRONG_ADD}__END__\n",
        # A here-document that swallows the tests up to their last line (MultiPL-E's call of
        # the test sub), so that whatever the suite runs after them still runs.
        "heredoc-swallows-the-tests": f"{_WRONG_ADD}my $skip = <<'testhumaneval();';\n",
    },
    disable_hacks={
        # The tests' `exit 1` (compiled after the program's BEGIN) made a no-op.
        "core-global-exit": f"BEGIN {{ *CORE::GLOBAL::exit = sub {{ 1 }}; }}\n{_WRONG_ADD}",
        # Every integer literal of the tests becomes a value equal to anything.
        "overloaded-constants": "package Yes;\n"
        "use overload '==' => sub { 1 }, '0+' => sub { ${$_[0]} }, fallback => 1;\n"
        "package main;\n"
        "BEGIN { overload::constant(integer => sub { my $v = $_[1]; bless \\$v, 'Yes' }); }\n"
        f"{_WRONG_ADD}",
        # A source filter rewrites the rest of the file as perl reads it: the tests lose their
        # `exit 1`, while the code after them still runs.
        "source-filter": "use Filter::Util::Call;\n"
        "BEGIN { filter_add(sub { my $status = filter_read(); s/exit 1;//; $status; }); }\n"
        f"{_WRONG_ADD}",
        # A returned value equal to anything.
        "overloaded-result": "package Yes;\n"
        "use overload '==' => sub { 1 }, 'eq' => sub { 1 }, fallback => 1;\n"
        "package main;\nsub add { return bless {}, 'Yes'; }\n",
    },
    checker="""my ($input, $output, $answer) = @ARGV;
sub slurp { open my $fh, '<', $_[0] or die; local $/; my $s = <$fh>; $s =~ s/^\\s+|\\s+$//g; $s }
my $n = slurp($input);
exit((slurp($output) - slurp($answer)) % $n == 0 ? 0 : 1);
""",
)
