from torchvision.transforms import InterpolationMode
from torchvision._stub import module_getattr as __getattr__
