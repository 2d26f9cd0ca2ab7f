"""Reference for the ONNX-export row: optimum's exporter (`optimum-cli export onnx --task fill-mask`,
from optimum-onnx, which requires transformers < 4.58: run in the transformers 4.57 environment)
writing the masked-LM model of DIRECTORY to OUT/model.onnx, opset 17, with its own validation
(which reports differences as warnings and returns normally).

    python optimum_onnx_export.py DIRECTORY OUT
"""

import sys

from optimum.exporters.onnx import main_export

if __name__ == "__main__":
    main_export(sys.argv[1], output=sys.argv[2], task="fill-mask", opset=17, device="cpu")
