//! `plot`: a recording drawn as SVG (see `ntprof_perf::plot`).

use super::args::{PlotArgs, PlotKind};
use anyhow::{bail, Context, Result};
use ntprof_perf::plot::{draw, Data, Kind, Options};

pub fn plot(a: &PlotArgs) -> Result<i32> {
    if a.width < 200 || a.height < 150 || a.width > 20_000 || a.height > 20_000 {
        bail!("--width/--height: between 200×150 and 20000×20000 pixels");
    }
    let opts = Options {
        kind: match a.kind {
            PlotKind::Breakdown => Kind::Breakdown,
            PlotKind::Heatmap => Kind::Heatmap,
            PlotKind::Histogram => Kind::Histogram,
        },
        stage: a.stage.clone(),
        p99: a.p99,
        cdf: a.cdf,
        width: a.width,
        height: a.height,
    };
    let imported = super::import::rows_of(&a.file)?;
    let mut data = Data::load(imported.as_ref().map_or(a.file.as_path(), |i| i.path()))?;
    data.file = a.file.display().to_string();
    // A bad --stage is refused before anything is drawn.
    data.pick_stage(a.stage.as_deref())?;
    let out = a.output.display().to_string();
    let svg = draw::svg(&data, &opts, &out)?;
    std::fs::write(&a.output, svg).with_context(|| format!("cannot write {out}"))?;
    let groups: Vec<&str> = data.groups.iter().map(|g| g.name.as_str()).collect();
    ntprof_perf::say!(
        "ntprof-perf: {out}: {:?} of {} groups ({})",
        a.kind,
        groups.len(),
        groups.join(", ")
    );
    Ok(0)
}
