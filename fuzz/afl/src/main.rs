//! `pacer-afl TARGET`: one of `pacer-fuzz`'s targets as an AFL++ harness
//! (persistent mode; a broken invariant panics, which AFL++ records as a
//! crash). `pacer-afl --list` names the targets; `pacer-afl --seeds TARGET
//! DIR` writes the target's seeds into DIR (the start of a corpus).
//! Built and run by `ci/fuzz.sh --afl`.

use pacer_fuzz::targets;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--list"] => {
            for t in targets::all() {
                println!("{}", t.name());
            }
        }
        ["--seeds", name, dir] => {
            let t = targets::by_name(name).unwrap_or_else(|| unknown(name));
            std::fs::create_dir_all(dir).expect("create the corpus directory");
            for (i, s) in t.seeds().iter().enumerate() {
                let p = std::path::Path::new(dir).join(format!("seed-{i}"));
                std::fs::write(&p, s).expect("write a seed");
            }
        }
        [name] => {
            let t = targets::by_name(name).unwrap_or_else(|| unknown(name));
            let max = t.max_len();
            let mut t = std::panic::AssertUnwindSafe(t);
            afl::fuzz!(|data: &[u8]| {
                if data.len() > max {
                    return;
                }
                if let Err(why) = t.run(data) {
                    panic!("{}: {why}", t.name());
                }
            });
        }
        _ => {
            eprintln!("usage: pacer-afl TARGET | --list | --seeds TARGET DIR");
            std::process::exit(2);
        }
    }
}

fn unknown(name: &str) -> ! {
    eprintln!("pacer-afl: no target {name:?} (pacer-afl --list)");
    std::process::exit(2);
}
