"""`bench/suite_time.py` reads the suite's JUnit XML into outcome counts and per-file seconds."""
from bench import suite_time

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.a_test" name="test_one" time="2.5"/>
<testcase classname="tests.a_test.TestSeed" name="test_two" time="1.0"><failure message="x"/>
</testcase>
<testcase classname="tests.b_test" name="test_three" time="7.25"><skipped message="y"/>
</testcase></testsuite></testsuites>"""


def test_outcomes_and_files_longest_first(tmp_path):
  path = tmp_path / "junit.xml"
  path.write_text(JUNIT, encoding="utf-8")
  outcomes, files = suite_time.per_file(str(path))
  assert outcomes == {"passed": 1, "failed": 1, "skipped": 1}
  assert files == [{"file": "tests/b_test.py", "tests": 1, "seconds": 7.2},
                   {"file": "tests/a_test.py", "tests": 2, "seconds": 3.5}]
