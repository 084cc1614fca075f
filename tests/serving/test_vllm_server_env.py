"""What a vLLM server is started with, without starting one: the eager-mode environment."""

from __future__ import annotations

from legorl.serving.vllm import VLLMServer, VLLMServerConfig
from legorl.serving.vllm.server import EAGER_ENV


def test_an_eager_server_runs_without_dynamo_and_a_graph_server_keeps_it(tmp_path):
    """vLLM compiles its logprob-rank helper with torch.compile even under --enforce-eager; an eager server
    turns dynamo off (the first logprobs request then skips a ~8 s compile), a graph-mode server keeps it, and
    the config's own env still wins."""
    eager = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path))
    assert "--enforce-eager" in eager.command()
    assert eager.environment()["TORCHDYNAMO_DISABLE"] == "1" == EAGER_ENV["TORCHDYNAMO_DISABLE"]
    graph = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path,
                                        enforce_eager=False))
    assert "--enforce-eager" not in graph.command() and "TORCHDYNAMO_DISABLE" not in graph.environment()
    mine = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path,
                                       env={"TORCHDYNAMO_DISABLE": "0"}))
    assert mine.environment()["TORCHDYNAMO_DISABLE"] == "0"
