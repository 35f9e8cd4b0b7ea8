//! Reads a `.pte` and writes it back with etch's writer: `rewrite IN.pte OUT.pte`.
//! `tools/check_writer.py` uses it to check that ExecuTorch's runtime runs etch-written files.

fn main() -> etch::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        return Err(etch::Error::invalid_argument(
            "usage: rewrite IN.pte OUT.pte",
        ));
    };
    let program = etch::Program::from_file(input)?;
    let bytes =
        etch::ProgramParts::from_program(&program)?.to_bytes(etch::WriteOptions::default())?;
    std::fs::write(output, bytes)?;
    Ok(())
}
