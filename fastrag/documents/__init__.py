"""Documents: readers, the node-group registry and the on-disk store."""

from fastrag.documents.document import Document
from fastrag.documents.group import NodeGroup
from fastrag.documents.readers import ReadReport, read_file
from fastrag.documents.store import Store

__all__ = ["Document", "NodeGroup", "ReadReport", "Store", "read_file"]
