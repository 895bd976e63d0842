"""Haskell with the host's GHC.

The program and its tests are two modules, not one file: the program becomes module
``Solution`` and the tests module ``Main``, which imports it. In one module a program
could undo the tests after it (``import Prelude hiding ((==))`` and its own ``==``,
``{-# LANGUAGE CPP #-}`` with ``#define error const (pure ())``, ``RebindableSyntax``),
and the tests could not import anything (imports come first). As two modules, the
program's pragmas and imports stay in its own module, and the tests see Prelude's names,
never the program's (``import Solution hiding (<Prelude's names>)``).

The executor hands over one source file (the program, then the tests from the
``test_prelude`` line on); the compile step splits it at the last such line, which only
the tests can hold (the program comes first). A stdin/stdout program gets a ``Main`` of
ours that runs its ``main`` (see ``_IO_MAIN``).
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    last_line_at,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
    split_compile_script,
)
from sandbox_workers.languages.native import EXIT_CALLED_STATUS
from schemas import Limits

__all__ = ["Haskell", "split_point"]

BINARY = "main"
SOURCE = "main.hs"
# Where the tests start: a whole line (a comment), the last such line of the source.
SPLIT = "{- rewardbus: the tests start here -}"
# Split the source into Solution.hs and Main.hs at the last SPLIT line ($1), then run
# GHC ("$@"). A constant script; the source is only data to it.
_SPLIT_SCRIPT = split_compile_script(SOURCE, "Solution.hs", "Main.hs", "Main.hs", "Solution.hs")
# GHC's runtime, its binary and the GC's bookkeeping, outside the heap that -M caps.
_RTS_OVERHEAD_MB = 32
_HEAP_EXHAUSTED_STATUS = 251
# Everything Prelude exports (base-4.15, `ghc --show-iface Prelude.hi`): the tests import
# the program without these, so `==`, `error`, `show`... in the tests are Prelude's even
# when the program hides Prelude's and defines its own. Hiding a name the program does
# not define is no error.
_PRELUDE_WORDS = (
    "Applicative Bool Bounded Char Double EQ Either Enum Eq False FilePath Float Floating "
    "Foldable Fractional Functor GT IO IOError Int Integer Integral Just LT Left Maybe Monad "
    "MonadFail Monoid Nothing Num Ord Ordering Rational Read ReadS Real RealFloat RealFrac Right "
    "Semigroup Show ShowS String Traversable True Word abs acos acosh all and any appendFile "
    "asTypeOf asin asinh atan atan2 atanh break ceiling compare concat concatMap const cos cosh "
    "curry cycle decodeFloat div divMod drop dropWhile either elem encodeFloat enumFrom "
    "enumFromThen enumFromThenTo enumFromTo error errorWithoutStackTrace even exp exponent fail "
    "filter flip floatDigits floatRadix floatRange floor fmap foldMap foldl foldl1 foldr foldr1 "
    "fromEnum fromInteger fromIntegral fromRational fst gcd getChar getContents getLine head id "
    "init interact ioError isDenormalized isIEEE isInfinite isNaN isNegativeZero iterate last "
    "lcm length lex lines log logBase lookup map mapM mapM_ mappend max maxBound maximum maybe "
    "mconcat mempty min minBound minimum mod negate not notElem null odd or otherwise pi pred "
    "print product properFraction pure putChar putStr putStrLn quot quotRem read readFile "
    "readIO readList readLn readParen reads readsPrec realToFrac recip rem repeat replicate "
    "return reverse round scaleFloat scanl scanl1 scanr scanr1 seq sequence sequenceA sequence_ "
    "show showChar showList showParen showString shows showsPrec significand signum sin sinh "
    "snd span splitAt sqrt subtract succ sum tail take takeWhile tan tanh toEnum toInteger "
    "toRational traverse truncate uncurry undefined unlines until unwords unzip unzip3 userError "
    "words writeFile zip zip3 zipWith zipWith3 main"
)
_PRELUDE_OPERATORS = (
    "!! $ $! && * ** *> + ++ - . / /= < <$ <$> <* <*> <= <> =<< == > >= >> >>= ^ ^^ ||"
)
_PRELUDE_NAMES = [*_PRELUDE_WORDS.split(), *(f"({op})" for op in _PRELUDE_OPERATORS.split())]
# The imports of our Main modules: all qualified, so no name of theirs meets the tests'.
# (Prelude's qualified import ends its implicit one: the tests' module imports it again.)
_IMPORTS = (
    "import qualified Prelude as RewardbusPrelude\n"
    "import qualified Control.Exception as RewardbusException\n"
    "import qualified Data.Bits as RewardbusBits\n"
    "import qualified Data.List as RewardbusList\n"
    "import qualified System.Exit as RewardbusExit\n"
    "import qualified System.IO as RewardbusIO\n"
)
# A heap past +RTS -M raises HeapOverflow in the main thread; GHC's own report ("Heap
# exhausted") would read as a crash, this one reads as the memory limit it is.
_ON_HEAP_OVERFLOW = f"""rewardbusOutOfMemory :: RewardbusPrelude.IO a
rewardbusOutOfMemory = do
  RewardbusIO.hPutStrLn RewardbusIO.stderr "Out of memory: heap exhausted (+RTS -M)"
  RewardbusExit.exitWith (RewardbusExit.ExitFailure {_HEAP_EXHAUSTED_STATUS})
"""
_IO_MAIN = f"""{SPLIT}
module Main (main) where
import qualified Solution
{_IMPORTS}
main :: RewardbusPrelude.IO ()
main = Solution.main `RewardbusException.catch` \\e -> case e of
  RewardbusException.HeapOverflow -> rewardbusOutOfMemory
  _ -> RewardbusException.throwIO e
{_ON_HEAP_OVERFLOW}"""
# The tests' main renamed, run by ours, which prints the marker once it has returned
# (an f-string: double braces are Haskell's). A program cannot leave early through
# `throw ExitSuccess` in a pure function (caught here: an exit during the tests), and an
# `error` called by the tests themselves (MultiPL-E's failed check) is a failed assertion,
# while the program's own errors stay crashes. The tests compile as Safe Haskell
# (test_compile_args), so the program has no unsafePerformIO to run anything else.
_TESTS_MAIN = re.compile(r"^main\b", re.M)
_RENAMED_MAIN = "rewardbusTestsMain"
# MultiPL-E's `let candidate = <function>`: the function under test.
_CANDIDATE = re.compile(r"\bcandidate\s*=\s*([a-z_][\w']*)")


def _tests_header(tests: str) -> str:
    """The tests' module header: Prelude's names are Prelude's, but for the function under
    test, which is the program's even when Prelude has one of that name (``gcd``)."""
    found = _CANDIDATE.search(tests)
    tested = found.group(1) if found else None
    hidden = ", ".join(name for name in _PRELUDE_NAMES if name != tested)
    prelude = f"import Prelude hiding ({tested})" if tested else "import Prelude"
    return f"module Main (main) where\nimport Solution hiding ({hidden})\n{prelude}\n{_IMPORTS}"


_AFTER_MAIN = f"""
main :: RewardbusPrelude.IO ()
main = do
  outcome <- RewardbusException.try {_RENAMED_MAIN}
  case outcome of
    RewardbusPrelude.Right _ -> do
      RewardbusIO.hPutStr RewardbusIO.stderr (RewardbusPrelude.map RewardbusPrelude.toEnum
        (RewardbusPrelude.zipWith RewardbusBits.xor rewardbusMasked rewardbusKey))
      RewardbusIO.hFlush RewardbusIO.stderr
    RewardbusPrelude.Left e -> rewardbusFailed e

rewardbusFailed :: RewardbusException.SomeException -> RewardbusPrelude.IO ()
rewardbusFailed e
  | RewardbusPrelude.Just RewardbusException.HeapOverflow <- RewardbusException.fromException e =
      rewardbusOutOfMemory
  | RewardbusPrelude.Just code <- RewardbusException.fromException e = do
      RewardbusIO.hPutStrLn RewardbusIO.stderr
        ("exit called during the tests: " RewardbusPrelude.++ RewardbusPrelude.show
          (code :: RewardbusExit.ExitCode))
      RewardbusExit.exitWith (RewardbusExit.ExitFailure {EXIT_CALLED_STATUS})
  | RewardbusPrelude.Just (RewardbusException.ErrorCallWithLocation message location)
      <- RewardbusException.fromException e
  , " in main:Main" `RewardbusList.isInfixOf` location = do
      RewardbusIO.hPutStr RewardbusIO.stderr
        (RewardbusPrelude.unlines ["assertion failed: " RewardbusPrelude.++ message, location])
      RewardbusExit.exitWith (RewardbusExit.ExitFailure 1)
  | RewardbusPrelude.otherwise = RewardbusException.throwIO e

{_ON_HEAP_OVERFLOW}
rewardbusMasked, rewardbusKey :: [RewardbusPrelude.Int]
"""
# A file-header OPTIONS_GHC pragma can name programs GHC then runs (-F -pgmF, -pgmP):
# code of the program's choosing at compile time, which could rewrite the tests' file.
# Its `{-#` becomes `{- `, a plain comment of the same length.
_OPTIONS_PRAGMA = re.compile(r"\{-#(?=\s*OPTIONS)", re.I)
_HEADER = re.compile(r"module\s+[\w.']+\s*(?:\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\))?\s*where\b")


def split_point(source: str) -> int | None:
    """Offset of the last SPLIT line in ``source`` (where the tests start), or None."""
    return last_line_at(source, SPLIT)


def _first_token(source: str) -> int:
    """Offset of the first thing in ``source`` that is not blank, a comment or a pragma."""
    index, depth = 0, 0
    while index < len(source):
        if source.startswith("{-", index):
            depth, index = depth + 1, index + 2
        elif depth and source.startswith("-}", index):
            depth, index = depth - 1, index + 2
        elif depth or source[index].isspace():
            index += 1
        elif re.match(r"--+(?![!#$%&*+./<=>?@\\^|~:])", source[index:]):
            newline = source.find("\n", index)
            index = len(source) if newline < 0 else newline
        else:
            break
    return index


def _as_module(program: str, name: str) -> str:
    """The program as module ``name`` (its own header, if any, replaced; no export list)."""
    program = _OPTIONS_PRAGMA.sub("{- ", program)
    start = _first_token(program)
    header = _HEADER.match(program, start)
    if header is None:
        return f"{program[:start]}module {name} where\n{program[start:]}"
    # Same line count as the replaced header, so the compiler's line numbers stay right.
    lines = "\n" * header.group(0).count("\n")
    return f"{program[:start]}module {name} where{lines}{program[header.end() :]}"


class Haskell(Language):
    """Haskell: GHC -O1 (two modules: the program, then ours or the tests')."""

    name = "haskell"
    aliases = frozenset({"haskell", "hs", "ghc"})
    fence_tags = frozenset({"haskell", "hs"})
    extension = "hs"
    test_prelude = f"{SPLIT}\n"
    # Safe Haskell for the program of an assert suite: no unsafePerformIO (nothing but
    # pure code runs when the tests call it), no Template Haskell (no code at compile
    # time), and a `{-# LANGUAGE Trustworthy #-}` of its own is an error.
    test_compile_args = ("-XSafe",)

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        ghc = resolve_binary("ghc")
        awk = resolve_binary("awk")
        shell = resolve_binary("sh")
        if ghc is None or awk is None or shell is None:
            return None
        version = probe_version([str(ghc), "--numeric-version"], prefix="ghc-")
        if version is None:
            return None
        # Debian's GHC keeps its package database under /var/lib/ghc (linked from
        # /usr/lib/ghc/package.conf.d); the rest is under /usr, which the jail shows.
        database = (ghc.parent.parent / "lib" / "ghc" / "package.conf.d").resolve()
        return Toolchain(
            language=self.name,
            version=version,
            paths={"ghc": str(ghc), "sh": str(shell)},
            mounts=read_only(database, awk),
        )

    def prepare_source(self, source: str) -> str:
        split = split_point(source)
        if split is None:
            return f"{_as_module(source, 'Solution')}\n{_IO_MAIN}"
        return f"{_as_module(source[:split], 'Solution')}\n{source[split:]}"

    def source_name(self, source: str) -> str:
        del source
        return SOURCE

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        body = tests.removeprefix(self.test_prelude)
        if body == tests or len(re.findall(r"^main\s*=", body, re.M)) != 1:
            return None
        masked, key = masked_marker(marker)
        return (
            f"{self.test_prelude}{_tests_header(body)}{_TESTS_MAIN.sub(_RENAMED_MAIN, body)}\n"
            f"{_AFTER_MAIN}rewardbusMasked = [{byte_list(masked)}]\n"
            f"rewardbusKey = [{byte_list(key)}]\n"
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        del source_name
        return CompileStep(
            argv=(
                toolchain.paths["sh"],
                "-c",
                _SPLIT_SCRIPT,
                "sh",
                SPLIT,
                toolchain.paths["ghc"],
                "-O1",
                "-rtsopts",
                "-v0",
                "-fdiagnostics-color=never",
                "-o",
                BINARY,
            ),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain
        return Launch(
            argv=(f"./{entry}", "+RTS", f"-M{limits.memory_mb}m", "-RTS"),
            memory_overhead_mb=_RTS_OVERHEAD_MB,
        )
