"""Offline work over files of states: `kime score` (every row answered as `predict` answers
it, written append-only and resumable) and `kime calibrate` (Laya's calibration fitted on
labelled rows, without PyTorch). One module per part: `source` (JSONL / Parquet rows in),
`sink` (rows out, crash-safe, resumed), `score` (rows -> results through the engine's shared
batches), `options` (the engine a job runs on), `engines` (which one `--engine` names),
`on_ray` (the same scoring on a Ray cluster, public as `kime.ray`), `job` (a `kime score` run:
signals, progress, the closing line), `fit` (Laya's fitters in NumPy), `calibrate` and `report`
(`kime calibrate`), `cli` (the two commands)."""
