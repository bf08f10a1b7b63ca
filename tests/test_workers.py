"""Worker pool policy that needs no compile: GPU spreading, environment, dead workers."""

from minifier import protocol as p
from minifier.launcher import LauncherSpec
from minifier.workers import Pool, PoolConfig, PoolError, _worker_env


def config(tmp_path, **kwargs) -> PoolConfig:
    spec = LauncherSpec(path=str(tmp_path / "minifier_launcher.py"), pt2=str(tmp_path / "x.pt2"), run_repro_line=0,
                        env={"TORCHINDUCTOR_CACHE_DIR": "/tmp/cache", "TORCHDYNAMO_REPRO_AFTER": None})
    init = p.InitRequest(launcher=spec, work_dir=str(tmp_path))
    return PoolConfig(init=init, log_dir=str(tmp_path), **kwargs)


def test_workers_are_spread_round_robin_over_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHDYNAMO_REPRO_AFTER", "aot")
    cfg = config(tmp_path, size=4, devices=["0", "1", "2"])
    envs = [_worker_env(cfg, i) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "2", "0"]
    assert all(e["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/cache" and "TORCHDYNAMO_REPRO_AFTER" not in e for e in envs)


def test_no_devices_leaves_visibility_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "CUDA_VISIBLE_DEVICES" not in _worker_env(config(tmp_path, size=1), 0)


def test_workers_that_cannot_start_give_a_clear_error(tmp_path):
    # An interpreter that exits at once stands for a broken environment (no torch, bad CUDA install).
    pool = Pool(config(tmp_path, size=1, python="/bin/false", start_timeout=30))
    try:
        pool.call(p.DescribeRequest())
    except PoolError as e:
        assert e.code == "environment" and "keep dying while starting" in str(e)
    else:
        raise AssertionError("expected PoolError")
    finally:
        pool.close()
