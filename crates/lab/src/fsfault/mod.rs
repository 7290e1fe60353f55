//! File systems under SSD faults (jaffer-thesis-2023.txt chapter 2; issue 20): the test
//! programs of Table 2.2 and the population they run on. The `inject` layer they run under is
//! `flashrig_engines::inject` (docs/inject.md); the study that runs one fault per experiment
//! and classifies what the file system did is the next step.

pub mod programs;
