//! Images in: files and uploads decoded to 8-bit RGB ([`decode`]), resized the way the Python
//! tools that trained and published a model do it ([`resize`]: Pillow's and torch's
//! antialiased filters, OpenCV's bilinear), and turned into a model's input tensor
//! ([`process`]: Hugging Face image processors from `preprocessor_config.json`,
//! torchvision-style transforms, Ultralytics' letterbox).
//!
//! Every function that reads outside bytes treats them as hostile: a bad file is an
//! [`ImageError`] naming the file and the reason, and an image whose header promises more
//! pixels than [`MAX_PIXELS`] is refused before any pixel buffer is allocated.

mod decode;
mod error;
pub mod process;
pub mod resize;

pub use decode::{decode_image_bytes, decode_image_file, RgbImage, MAX_PIXELS, MAX_SIDE};
pub use error::ImageError;
pub use process::{CropRule, ImageProcessor, Letterbox, LetterboxInput, PixelValues, ResizeRule};
pub use resize::{resize_rgb, Filter, ResizeKernel};
