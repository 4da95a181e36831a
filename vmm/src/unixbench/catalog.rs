//! UnixBench's twelve index tests as this suite runs them: name (the
//! `test=` value in result lines), a short honest title, the unit, the
//! seconds a pass runs, and UnixBench's baseline score (the index of a
//! test is score / baseline x 10). Must agree with the test table in guests/linux/suite/main.c (a
//! test runs `ubench list` against it).

/// One index test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TestInfo {
    pub name: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    pub baseline: f64,
    /// How long one pass runs unless told otherwise (`--seconds`).
    pub seconds: f64,
    /// UnixBench's "long" tests run 10 passes, the others 3.
    pub long_repeat: bool,
}

/// The twelve tests, in the order the suite runs and the table lists them.
pub const TESTS: [TestInfo; 12] = [
    t(
        "dhry2reg",
        "Integer mix (dhry2reg-style)",
        "lps",
        116700.0,
        10.0,
        true,
    ),
    t(
        "whetstone-double",
        "Whetstone-style, double",
        "MWIPS",
        55.0,
        10.0,
        true,
    ),
    t("execl", "Execl throughput", "lps", 43.0, 30.0, false),
    t(
        "fstime",
        "File copy 1024 B x 2000 blocks",
        "KBps",
        3960.0,
        30.0,
        false,
    ),
    t(
        "fsbuffer",
        "File copy 256 B x 500 blocks",
        "KBps",
        1655.0,
        30.0,
        false,
    ),
    t(
        "fsdisk",
        "File copy 4096 B x 8000 blocks",
        "KBps",
        5800.0,
        30.0,
        false,
    ),
    t(
        "pipe",
        "Pipe throughput (512 B)",
        "lps",
        12440.0,
        10.0,
        true,
    ),
    t(
        "context1",
        "Pipe-based context switching",
        "lps",
        4000.0,
        10.0,
        true,
    ),
    t("spawn", "Process creation", "lps", 126.0, 30.0, false),
    t(
        "syscall",
        "System call overhead",
        "lps",
        15000.0,
        10.0,
        true,
    ),
    t(
        "shell1",
        "Shell scripts (1 concurrent)",
        "lpm",
        42.4,
        60.0,
        false,
    ),
    t(
        "shell8",
        "Shell scripts (8 concurrent)",
        "lpm",
        6.0,
        60.0,
        false,
    ),
];

const fn t(
    name: &'static str,
    title: &'static str,
    unit: &'static str,
    baseline: f64,
    seconds: f64,
    long_repeat: bool,
) -> TestInfo {
    TestInfo {
        name,
        title,
        unit,
        baseline,
        seconds,
        long_repeat,
    }
}

/// The test called `name`, if it is one of the twelve.
pub fn find(name: &str) -> Option<&'static TestInfo> {
    TESTS.iter().find(|t| t.name == name)
}
