from torchvision._stub import module_getattr as __getattr__
