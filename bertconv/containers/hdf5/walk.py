"""The datasets below an open HDF5 group, found by HDF5's own walk of the file."""

from __future__ import annotations


from ...lazy import lazy_module

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import h5py
else:  # imported on first use: most commands read no HDF5 file
    h5py = lazy_module("h5py")


def dataset_paths(group: h5py.Group) -> list[bytes]:
    """The path of every dataset below `group` (an open file is its root group), relative to it
    and as HDF5 stores it (bytes, not decoded), in HDF5's visiting order, each dataset once.

    HDF5's low-level visit, not h5py's `visititems`, which makes two objects per node visited.
    """
    paths: list[bytes] = []

    def collect(path: bytes, info) -> None:
        if info.type == h5py.h5o.TYPE_DATASET:
            paths.append(path)

    h5py.h5o.visit(group.id, collect, info=True)
    return paths
