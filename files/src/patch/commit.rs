//! Writing a computed patch to disk all-or-nothing: stage every new file and a hard-link
//! backup of every file that will be replaced or removed, then rename; if a step fails midway,
//! the backups are renamed back.

use crate::atomic;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the patch leaves at a path.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Write { bytes: Vec<u8>, mode: Option<u32> },
    Remove,
}

struct Step {
    target: PathBuf,
    temp: Option<PathBuf>,
    backup: Option<PathBuf>,
}

/// Applies `plan`. On error the tree is as it was (directories made for new files included).
pub(crate) fn commit(plan: &BTreeMap<PathBuf, Outcome>) -> Result<(), (PathBuf, io::Error)> {
    let mut steps: Vec<Step> = Vec::new();
    let mut made_dirs: Vec<PathBuf> = Vec::new();
    if let Err(e) = stage(plan, &mut steps, &mut made_dirs) {
        cleanup(&steps, &made_dirs);
        return Err(e);
    }
    let mut done = 0;
    let mut failure = None;
    for step in &steps {
        let result = match &step.temp {
            Some(temp) => fs::rename(temp, &step.target),
            None => fs::remove_file(&step.target),
        };
        if let Err(e) = result {
            failure = Some((step.target.clone(), e));
            break;
        }
        done += 1;
    }
    if let Some(failure) = failure {
        for step in steps[..done].iter().rev() {
            let _ = match &step.backup {
                Some(backup) => fs::rename(backup, &step.target),
                None => fs::remove_file(&step.target),
            };
        }
        cleanup(&steps, &made_dirs);
        return Err(failure);
    }
    for step in &steps {
        if let Some(backup) = &step.backup {
            let _ = fs::remove_file(backup);
        }
        atomic::sync_parent(&step.target);
    }
    Ok(())
}

fn stage(
    plan: &BTreeMap<PathBuf, Outcome>,
    steps: &mut Vec<Step>,
    made_dirs: &mut Vec<PathBuf>,
) -> Result<(), (PathBuf, io::Error)> {
    for (target, outcome) in plan {
        let with = |e: io::Error| (target.clone(), e);
        let exists = fs::symlink_metadata(target).is_ok();
        if matches!(outcome, Outcome::Remove) && !exists {
            continue;
        }
        if let Some(parent) = target.parent() {
            make_dirs(parent, made_dirs).map_err(with)?;
        }
        let mut step = Step {
            target: target.clone(),
            temp: None,
            backup: None,
        };
        if exists {
            let backup = atomic::sibling_name(target, "bak");
            fs::hard_link(target, &backup).map_err(with)?;
            step.backup = Some(backup);
        }
        // Recorded before staging so that cleanup removes the backup if staging fails.
        steps.push(step);
        if let Outcome::Write { bytes, mode } = outcome {
            let temp = atomic::stage(target, bytes, *mode).map_err(with)?;
            if let Some(last) = steps.last_mut() {
                last.temp = Some(temp);
            }
        }
    }
    Ok(())
}

/// `create_dir_all`, remembering which directories were new (outermost first).
fn make_dirs(dir: &Path, made: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = Some(dir);
    while let Some(d) = current {
        if d.as_os_str().is_empty() || fs::symlink_metadata(d).is_ok() {
            break;
        }
        missing.push(d.to_path_buf());
        current = d.parent();
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(&d) {
            Ok(()) => made.push(d),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn cleanup(steps: &[Step], made_dirs: &[PathBuf]) {
    for step in steps {
        if let Some(temp) = &step.temp {
            let _ = fs::remove_file(temp);
        }
        if let Some(backup) = &step.backup {
            let _ = fs::remove_file(backup);
        }
    }
    for d in made_dirs.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}
