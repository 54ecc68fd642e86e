//! `capsim report DIR`: draw the PNGs and report.md from a sweep's outputs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use capsim_report::plot::PlotSize;
use capsim_report::{read_sweep, write_report};
use clap::Args;

use super::BadInput;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A sweep's output directory (holding sweep.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Plot width in pixels.
    #[arg(long, default_value_t = 1200, value_name = "PX")]
    pub width: u32,

    /// Plot height in pixels.
    #[arg(long, default_value_t = 800, value_name = "PX")]
    pub height: u32,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let result = read_sweep(&args.dir.join("sweep.json")).map_err(|e| BadInput(e.to_string()))?;
    let size = PlotSize {
        width_px: args.width,
        height_px: args.height,
    };
    size.check().map_err(|e| {
        BadInput(format!(
            "--width {} --height {}: {e}",
            args.width, args.height
        ))
    })?;
    let written = write_report(&args.dir, &result, size).context("drawing the report")?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
