//! `plot` on a real recording: each kind is rendered by a real SVG renderer
//! (rsvg-convert), the picture must not be blank, and the SVG must name the groups,
//! the stages and the units.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Render an SVG to PNG and return (width, height, share of pixels that are not
/// background, distinct colours).
fn render(svg: &Path) -> (u32, u32, f64, usize) {
    let png = svg.with_extension("png");
    run_ok(Command::new("rsvg-convert").arg(svg).arg("-o").arg(&png));
    let dec = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut rd = dec.read_info().unwrap();
    let mut buf = vec![0; rd.output_buffer_size()];
    let info = rd.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    // Background: the corner pixel (white, or transparent outside the drawing).
    let bg = pixels[0].to_vec();
    let ink = pixels.iter().filter(|p| **p != bg.as_slice()).count();
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    (
        info.width,
        info.height,
        ink as f64 / pixels.len() as f64,
        colours.len(),
    )
}

#[test]
fn every_kind_renders_and_names_groups_and_stages() {
    let test = "every_kind_renders_and_names_groups_and_stages";
    if !kernel_ready(test) || !tool_ready(test, "rsvg-convert", &["--version"]) {
        return;
    }
    let l = LoopDev::new("plot", 64);
    l.scheduler("mq-deadline");
    let dir = tmp("plot");
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, pq) = (dir.join("io.csv"), dir.join("io.parquet"));
    let script = format!(
        "dd if=/dev/zero of={d} bs=4k count=200 oflag=direct status=none && \
         dd if={d} of=/dev/null bs=64k count=100 iflag=direct status=none",
        d = l.dev
    );
    run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&csv)
            .arg("-o")
            .arg(&pq)
            .args(["--", "sh", "-c", &script]),
    );
    let groups = [format!("{} read", l.name), format!("{} write", l.name)];
    let cases: [(&Path, &[&str], &[&str]); 5] = [
        (
            &csv,
            &["--kind", "breakdown"],
            &["q2d", "d2c", "q2c (total)", "mean", "p50", "latency (µs)"],
        ),
        (
            &pq,
            &["--kind", "breakdown", "--p99"],
            &["q2d", "d2c", "p99"],
        ),
        (
            &pq,
            &["--kind", "heatmap"],
            &["q2c (µs)", "time since the first I/O (s)"],
        ),
        (
            &csv,
            &["--kind", "heatmap", "--stage", "d2c_ns"],
            &["d2c (µs)"],
        ),
        (
            &pq,
            &["--kind", "histogram", "--cdf", "--stage", "q2d"],
            &[
                "q2d latency (µs, log scale)",
                "fraction of I/Os at or below",
            ],
        ),
    ];
    for (i, (input, args, words)) in cases.iter().enumerate() {
        let svg = dir.join(format!("{i}.svg"));
        run_ok(
            Command::new(bin())
                .arg("plot")
                .arg(input)
                .arg("-o")
                .arg(&svg)
                .args(*args),
        );
        let text = read(&svg);
        for w in groups
            .iter()
            .map(String::as_str)
            .chain(words.iter().copied())
        {
            assert!(text.contains(w), "{args:?}: `{w}` not in the SVG");
        }
        let (w, h, ink, colours) = render(&svg);
        assert_eq!((w, h), (1000, 600), "{args:?}");
        // Axes, labels and a single cell cover 0.015 of a heatmap; a few hundred I/Os
        // in under a second cover 0.03 to 0.04, so the heatmap's bar is lower.
        let min_ink = if args.contains(&"heatmap") {
            0.02
        } else {
            0.03
        };
        assert!(ink > min_ink, "{args:?}: {:.3} of the picture drawn", ink);
        assert!(colours >= 4, "{args:?}: {colours} colours");
    }
    let out = Command::new(bin())
        .arg("plot")
        .arg(&csv)
        .args(["-o", "/dev/null", "--kind", "heatmap", "--stage", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stage `nope`; stages: q2d, d2c, q2c"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn plot_refuses_what_is_not_a_recording() {
    let bad = tmp("notrec.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    let out = Command::new(bin())
        .arg("plot")
        .arg(&bad)
        .args(["-o", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not that of a recording of any profile")
    );
    let _ = std::fs::remove_file(bad);
}
